import os
import tempfile

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")
os.environ["STACKCURATE_CACHE"] = tempfile.mkdtemp(prefix="stackcurate-cache-")  # never the user's models


@pytest.fixture(scope="session")
def ray_local():
    """One embedded Ray (2 CPUs) shared by the whole test run."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def s3_endpoint():
    """A local S3-compatible server (moto) on loopback; yields its endpoint URL."""
    pytest.importorskip("moto")
    from helpers import free_port
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()
