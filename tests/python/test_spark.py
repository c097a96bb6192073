"""inpath inside Spark (local[2], loopback): mapInArrow results equal one process's, and
HyperLogLog images pass both ways between inpath and Spark's hll_sketch_agg / hll_union_agg /
hll_sketch_estimate (Apache DataSketches' format), register for register.

Spark must start: pyspark comes from scripts/requirements-test.txt and Java 17 from
scripts/apt-packages.txt. If it cannot, these tests fail with the reason; they never skip."""

import os
import sys

import numpy as np
import pandas as pd
import pytest

import inpath
import inpath.spark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


@pytest.fixture(scope="module")
def spark():
    # The Python workers must be this interpreter (the one inpath is installed in).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    try:
        s = (SparkSession.builder.master("local[2]").appName("inpath-tests")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    except Exception as e:  # noqa: BLE001 - the reason is the message
        pytest.fail(f"Spark (local[2]) did not start: {e}")
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def test_spark_hll_images_read_by_inpath_register_for_register(spark):
    df = (spark.range(0, 200_000, numPartitions=4)
          .withColumn("i", (F.col("id") % 70_000).cast("int"))
          .withColumn("s", F.concat(F.lit("user-"), (F.col("id") % 9_000).cast("string"))))
    row = df.agg(F.hll_sketch_agg("id").alias("id"), F.hll_sketch_agg("i", 14).alias("i"),
                 F.hll_sketch_agg("s").alias("s"),
                 F.hll_sketch_estimate(F.hll_sketch_agg("id")).alias("est")).collect()[0]
    ids = np.arange(200_000, dtype=np.int64)
    for name, lg_k, items in (("id", 12, ids), ("i", 14, (ids % 70_000).astype(np.int32)),
                              ("s", 12, [f"user-{v}" for v in ids % 9_000])):
        theirs = inpath.DataSketchesHll.from_bytes(bytes(row[name]))
        ours = inpath.DataSketchesHll(lg_k)
        ours.update(items)
        assert theirs.lg_k == lg_k
        assert theirs.registers() == ours.registers(), name
    assert abs(inpath.DataSketchesHll.from_bytes(bytes(row["id"])).estimate() / row["est"] - 1) < 0.02


def test_inpath_images_merge_in_spark(spark):
    parts = [np.arange(k * 50_000, k * 50_000 + 80_000, dtype=np.int64) for k in range(3)]
    images = []
    whole = inpath.DataSketchesHll(12)
    for p in parts:
        h = inpath.DataSketchesHll(12)
        h.update(p)
        whole.update(p)
        images.append((bytearray(h.to_bytes()),))
    df = spark.createDataFrame(images, "h binary")
    row = df.agg(F.hll_union_agg("h").alias("u"),
                 F.hll_sketch_estimate(F.hll_union_agg("h")).alias("est")).collect()[0]
    # Spark's union of inpath's images holds the registers of inpath's own merge.
    assert inpath.DataSketchesHll.from_bytes(bytes(row["u"])).registers() == whole.registers()
    assert abs(row["est"] / 180_000 - 1) < 0.05
    # The adapter: hll_sketch over a DataFrame column, read back by Spark.
    h = inpath.spark.hll_sketch(spark.range(0, 100_000, numPartitions=3), "id")
    mine = inpath.DataSketchesHll(12)
    mine.update(np.arange(100_000, dtype=np.int64))
    assert h.registers() == mine.registers()
    est = spark.createDataFrame([(bytearray(h.to_bytes()),)], "h binary") \
        .select(F.hll_sketch_estimate("h")).collect()[0][0]
    assert abs(est / 100_000 - 1) < 0.05


def test_map_in_arrow_sketch_and_corr_equal_one_process(spark):
    rng = np.random.default_rng(4)
    pdf = pd.DataFrame({
        "n": rng.integers(0, 30_000, 120_000).astype(np.int64),
        "w": [f"w{v}" for v in rng.integers(0, 2_000, 120_000)],
        "a": rng.random(120_000),
    })
    pdf["b"] = 3 * pdf["a"] + rng.random(120_000)
    df = spark.createDataFrame(pdf).repartition(3)
    got = inpath.spark.sketch(df, "n")
    want = inpath.Sketch()
    want.update(pdf["n"].to_numpy())
    assert got.to_bytes() == want.to_bytes()
    assert inpath.spark.approx_count_distinct(df, "w") == (
        lambda s: (s.update(pdf["w"].tolist()), s.cardinality())[1])(inpath.Sketch())
    r = inpath.spark.corr(df, ["a", "b"])
    w = inpath.corr(pdf[["a", "b"]])
    assert r.count == 120_000
    np.testing.assert_allclose(r.pearson.to_numpy(), w.pearson.to_numpy(), rtol=0, atol=1e-14)
    with pytest.raises(inpath.InpathError, match="not in the DataFrame"):
        inpath.spark.sketch(df, "nope")
