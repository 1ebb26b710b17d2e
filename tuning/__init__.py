"""Algorithm selection by measurement: the tuning database (db.py), Find (find.py; its worker program is the
driver's find_worker.py) and the Tuner that prim-select consults (tuner.py). The `openprim tune/explain/db/conv`
commands, which compile, are the driver's tuning_commands.py."""
