"""Algorithm selection by measurement: the tuning database (db.py), Find (find.py, worker.py), the Tuner that
prim-select consults (tuner.py), and the `openprim tune/explain/db/conv` commands (tune.py)."""
