from dataclasses import dataclass
NAME = "prim-select"


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    solver: str = ""

    def run(self, module_op):
        pass
