"""Used by tests/mount.rs: pandas, pyarrow and DuckDB on a detafs mount.

  analytics.py write DIR N     writes table.csv and table.parquet with N rows
  analytics.py read MOUNT      prints row counts and sums of v1 and v2
  analytics.py stage MOUNT     writes results with to_csv/to_parquet into staging/
"""
import sys

import duckdb
import pandas as pd
import pyarrow.parquet as pq


def frame(n):
    return pd.DataFrame({"id": range(n), "value": [i * 2 for i in range(n)]})


cmd, where = sys.argv[1], sys.argv[2]
if cmd == "write":
    df = frame(int(sys.argv[3]))
    df.to_csv(f"{where}/table.csv", index=False)
    df.to_parquet(f"{where}/table.parquet")
elif cmd == "read":
    for v in ("v1", "v2"):
        base = f"{where}/versions/{v}"
        csv = pd.read_csv(f"{base}/table.csv")
        parquet = pq.read_table(f"{base}/table.parquet").to_pandas()
        duck = duckdb.sql(
            f"select count(*), sum(value) from read_parquet('{base}/table.parquet')"
        ).fetchall()[0]
        duck_csv = duckdb.sql(f"select sum(value) from read_csv_auto('{base}/table.csv')").fetchall()[0]
        print(v, len(csv), int(csv.value.sum()), len(parquet), int(parquet.value.sum()), duck[0], int(duck[1]), int(duck_csv[0]))
elif cmd == "stage":
    df = pd.read_parquet(f"{where}/versions/latest/table.parquet")
    df["value"] = df["value"] + 1
    df.to_csv(f"{where}/staging/result.csv", index=False)
    df.to_parquet(f"{where}/staging/result.parquet")
    df.to_csv(f"{where}/staging/table.csv", index=False)  # overwrite in place
    print(int(df.value.sum()))
