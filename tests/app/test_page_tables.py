"""ui.shell.page.rows_table: rows go to st.dataframe as an Arrow table when they fit one, and stay a
DataFrame (shown as before) when they do not."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa

from ui.shell.page import rows_table


def test_uniform_rows_become_an_arrow_table_with_the_same_columns_and_values():
    rows = [{"n": 2 ** i, "ms": 0.5 * i, "method": f"m{i}", "ok": i % 2 == 0} for i in range(5)]
    table = rows_table(rows)
    assert isinstance(table, pa.Table)
    assert table.column_names == ["n", "ms", "method", "ok"]
    assert table.to_pylist() == rows
    assert pd.DataFrame(rows).equals(table.to_pandas())  # what a DataFrame would have shown


def test_non_finite_numbers_survive():
    table = rows_table([{"score": -math.inf}, {"score": math.nan}, {"score": 1.5}])
    values = table.column("score").to_pylist()
    assert values[0] == -math.inf and math.isnan(values[1]) and values[2] == 1.5


def test_rows_with_different_keys_keep_every_column():
    rows = [{"a": 1}, {"a": 2, "b": 3.0}]
    frame = rows_table(rows)
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == ["a", "b"]


def test_a_column_arrow_cannot_type_stays_a_dataframe():
    frame = rows_table([{"value": 1.0}, {"value": "NaN"}])
    assert isinstance(frame, pd.DataFrame) and frame["value"].tolist() == [1.0, "NaN"]


def test_a_generator_and_an_empty_list_and_a_dataframe():
    assert rows_table(({"x": i} for i in range(3))).column("x").to_pylist() == [0, 1, 2]
    assert isinstance(rows_table([]), pd.DataFrame) and rows_table([]).empty
    frame = pd.DataFrame({"x": [1]})
    assert rows_table(frame) is frame


def test_a_csv_export_takes_a_table_rows_or_a_function_that_builds_it_only_when_pressed():
    from ui.shell.page import csv_bytes

    frame = pd.DataFrame({"step": [0, 1], "ms": [0.5, 0.25]})
    built = []

    def build():
        built.append(1)
        return frame

    expected = b"step,ms\n0,0.5\n1,0.25\n"
    assert csv_bytes(frame) == expected
    assert csv_bytes([{"step": 0, "ms": 0.5}, {"step": 1, "ms": 0.25}]) == expected
    assert not built  # nothing is built until the export is asked for
    assert csv_bytes(build) == expected and built == [1]
