"""Algorithm selection by measurement: the tuning database (db.py), Find (find.py; its worker program is the
driver's find_worker.py), the Tuner that prim-select consults (tuner.py), fleet tuning on a Ray cluster
(fleet.py) and the database's export file that ships (dbfile.py). The `openprim tune/explain/db/conv`
commands, which compile, are the driver's tuning_commands.py."""
