from dataclasses import dataclass
NAME = "prim-tile"


@dataclass
class Options:
    NAME = NAME
    target: str = "cpu"
    solver: str = ""

    def run(self, module_op):
        pass
