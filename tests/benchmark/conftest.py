import pytest

from mlts.benchmark.stats import latency_stats


def bench_record(model="mobilenet_v1_1.0_224", driver="nnapi-reference", mode="sync", *, p50=10.0,
                 spread=0.0, runs=None, status="ok", top1=0.70, top5=0.90, agree1=1.0, cts=True,
                 max_err=1e-6, **extra):
    """A benchmark record dict whose latency has median `p50` ms and p90 - p50 = `spread` ms (std 0 unless
    `runs` (ms) gives the exact samples)."""
    rec = {"schema_version": 1, "kind": "benchmark", "run_id": "run-a", "model": model, "driver": driver,
           "mode": mode, "preference": "FAST_SINGLE_ANSWER", "status": status, "message": None,
           "unsupported_ops": []}
    if status == "ok":
        if runs is not None:
            rec["latency"] = latency_stats([r / 1000 for r in runs]).to_dict()
        else:
            rec["latency"] = {"count": 100, "total_ms": p50 * 100, "min_ms": p50, "mean_ms": p50, "std_ms": 0.0,
                              "p50_ms": p50, "p90_ms": p50 + spread, "p95_ms": p50 + spread,
                              "p99_ms": p50 + spread, "max_ms": p50 + spread, "throughput_per_s": 1000 / p50,
                              "histogram": {"edges_ms": [p50, p50 + spread], "counts": [100]}}
        rec["accuracy"] = {"output_dtype": "float32", "reference_samples": 1500, "mse": max_err ** 2,
                           "max_abs_error": max_err, "nonfinite_mismatches": 0, "cts_tolerance": None,
                           "cts_violations": 0 if cts else 5, "cts_pass": cts, "top1_agreement": agree1,
                           "top5_agreement": 1.0, "label_samples": 1500, "top1_accuracy": top1,
                           "top5_accuracy": top5}
    else:
        rec["message"] = "driver failed"
        rec["latency"] = None
    rec.update(extra)
    return rec


@pytest.fixture
def make_record():
    return bench_record
