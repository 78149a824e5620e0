"""bench/sweep_table.py: the sweeps' logs side by side. No GPU."""
from bench_loader import load

sweep_table = load("sweep_table")

# Two variants of a softmax sweep (the second changes one forward plan and
# runs it faster), then an A/B of rmsnorm in two rounds a side.
LOG = """\
== softmax bf16 defaults
tuning override: 
softmax, dtype bfloat16, M*N = 268435456, copy 4117.1 GB/s
        N        M | forward kernel                           |    fwd us  %copy | backward kernel                          |    bwd us  %copy | fwd max rel err
      256  1048576 | reg   team    8 thr  256 cl  1 vpt 4     |     269.6  96.7% | reg   team    8 thr  256 cl  1 vpt 4     |     380.4 102.8% | 3.15e-03
  1048576      256 | chunk thr  512 cl 16 vecs 8192 staged 6144 |     364.4  71.6% | chunk thr  512 cl 16 vecs 8192 staged 3072 |     516.4  75.8% | 3.81e-03
== softmax bf16 softmax_fwd_grid=3
tuning override: softmax_fwd_grid=3
softmax, dtype bfloat16, M*N = 268435456, copy 4100.0 GB/s
        N        M | forward kernel                           |    fwd us  %copy | backward kernel                          |    bwd us  %copy | fwd max rel err
      256  1048576 | reg   team    8 thr  256 cl  1 vpt 4     |     270.0  96.3% | reg   team    8 thr  256 cl  1 vpt 4     |     380.0 102.9% | 3.15e-03
  1048576      256 | grid  ranks 128 groups  1 rows 2 stages 8 lag 2 tile 1024 smem 134528 grid 128 |     291.5  89.8% | chunk thr  512 cl 16 vecs 8192 staged 3072 |     516.0  75.8% | 3.80e-03
== rmsnorm f32 new round 1
dtype float32, M*N = 268435456, copy 4116.6 GB/s
        N        M | plan (src/rmsnorm.cu)                         |        us    GB/s  %copy | max rel err
     1024   262144 | reg     team   32 thr  256 cl  1 vpt  4        |     100.0  3948.5  95.0% | 3.84e-03
== rmsnorm f32 old round 1
dtype float32, M*N = 268435456, copy 4116.6 GB/s
        N        M | plan (src/rmsnorm.cu)                         |        us    GB/s  %copy | max rel err
     1024   262144 | reg     team   32 thr  256 cl  1 vpt  4        |     110.0  3948.5  90.0% | 3.84e-03
== rmsnorm f32 new round 2
dtype float32, M*N = 268435456, copy 4116.6 GB/s
        N        M | plan (src/rmsnorm.cu)                         |        us    GB/s  %copy | max rel err
     1024   262144 | reg     team   32 thr  256 cl  1 vpt  4        |     102.0  3948.5  93.0% | 3.84e-03
== rmsnorm f32 old round 2
dtype float32, M*N = 268435456, copy 4116.6 GB/s
        N        M | plan (src/rmsnorm.cu)                         |        us    GB/s  %copy | max rel err
     1024   262144 | reg     team   32 thr  256 cl  1 vpt  4        |     114.0  3948.5  88.0% | 3.84e-03
"""


def test_parse_folds_rounds_and_reads_every_timed_column():
    parsed = sweep_table.parse(LOG.splitlines(True))
    assert list(parsed) == [("softmax", "bf16"), ("rmsnorm", "f32")]
    sm = parsed[("softmax", "bf16")]
    assert sm["columns"] == ["fwd us", "bwd us"]
    assert list(sm["variants"]) == ["defaults", "softmax_fwd_grid=3"]
    assert sm["variants"]["softmax_fwd_grid=3"][1048576]["fwd us"] == [(291.5, 89.8)]
    assert sm["variants"]["softmax_fwd_grid=3"][1048576]["plan"][0].startswith("grid  ranks 128")
    rms = parsed[("rmsnorm", "f32")]
    assert rms["columns"] == ["us"]
    assert list(rms["variants"]) == ["new", "old"]
    assert rms["variants"]["old"][1024]["us"] == [(110.0, 90.0), (114.0, 88.0)]


def test_render_compares_each_variant_with_the_first_and_lists_changed_plans():
    text = sweep_table.render(sweep_table.parse(LOG.splitlines(True)))
    assert "### softmax bf16: fwd us" in text and "### softmax bf16: bwd us" in text
    # The grid's forward at 1M against the defaults': 291.5 / 364.4 - 1 = -20.0%.
    assert "| 1048576 | 364.4 (71.6%) | 291.5 (89.8%) -20.0% |" in text
    assert "- `softmax_fwd_grid=3` N = 1048576: chunk thr  512 cl 16 vecs 8192 staged 6144 -> grid  ranks 128" in text
    # Rounds folded into their median: new 101.0, old 112.0 (+10.9%).
    assert "| 1024 | 101.0 (94.0%) | 112.0 (89.0%) +10.9% |" in text
    assert "Every variant's plans are `new`'s." in text


def test_main_without_logs_prints_its_use(capsys):
    assert sweep_table.main([]) == 2
    assert "sweep_table.py" in capsys.readouterr().err
