"""The AMD backend: ROCDL lowering and hsaco code objects (compiler.py)."""
