"""pytest setup for quack_cpp.

Markers (registered here):
  requires_gpu  needs a CUDA GPU that runs the kernels (sm_90: H100/H200);
                skipped with the reason "no CUDA GPU" (or which GPU) otherwise.
  huge          allocates several GiB or sweeps very long rows; part of the
                default run (a few seconds on an H200), deselect with
                -m "not huge".
Every test starts from a seed derived from its own name, so inputs are fresh
per test but reproducible.
"""
import types
import zlib

import pytest
import torch


def _gpu_status():
    """(runs_kernels, description)."""
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    if (major, minor) != (9, 0):
        return False, f"{name} is sm_{major}{minor}; the kernels are built for sm_90a (H100/H200)"
    return True, name


GPU_OK, GPU_DESC = _gpu_status()


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_gpu: needs an sm_90 CUDA GPU; skipped ('no CUDA GPU') otherwise")
    config.addinivalue_line("markers", "huge: multi-GiB or very long-row GPU test (deselect with -m 'not huge')")


def pytest_report_header(config):
    try:
        import quack_cpp

        pkg = f"quack_cpp {quack_cpp.__version__} from {quack_cpp.__file__}"
    except ImportError as e:  # reported here; the tests then fail on import
        pkg = f"quack_cpp NOT importable ({e}); build it with: pip install --no-build-isolation --no-deps ."
    gpu = GPU_DESC if GPU_OK else f"none usable ({GPU_DESC}): GPU tests will be skipped"
    return [pkg, f"torch {torch.__version__}; GPU: {gpu}"]


def pytest_collection_modifyitems(config, items):
    if GPU_OK:
        return
    skip = pytest.mark.skip(reason=GPU_DESC)
    for item in items:
        if "requires_gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed(request):
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    yield


@pytest.fixture
def ce_validate_only(monkeypatch):
    """quack_cpp's cross-entropy library calls on CPU tensors, each launch
    (the binding's mode 3 where it needs no workspace, else mode 0 with the
    one it asked for) turned into the binding's validate-only mode 1: every
    argument reaches the C++ checks and no device is touched. Returns a list
    that gets "launch" at each launch (a test may add its own events)."""
    import quack_cpp

    ce = quack_cpp._cross_entropy
    real = ce._C
    events = []

    def cross_entropy(*a, **shard):
        args, (ws_ptr, ws_bytes, mode, _stream) = a[:-4], a[-4:]
        assert mode in (0, 3)
        if mode == 3:
            nbytes = real.cross_entropy(*args, 0, 0, 2, 0, **shard)
            if nbytes:
                return nbytes
        events.append("launch")
        return real.cross_entropy(*args, ws_ptr, ws_bytes, 1, 0, **shard)

    binding = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    binding.cross_entropy = cross_entropy
    monkeypatch.setattr(ce, "_C", binding)
    monkeypatch.setattr(ce, "_on_device", lambda dev, launch, *a: launch(*a))
    monkeypatch.setattr(ce, "_raw_stream", lambda dev: 0)
    return events
