"""The Slurm tests' one test cluster, and a clean queue after each test.

The session fixture is registered here, once: imported into each test module, pytest
took each import for a fixture of its own and started one cluster per module.
"""

from collections.abc import Iterator

import pytest
from slurm_cluster import SlurmCluster, slurm_cluster_fixture  # noqa: F401 (registers it)


@pytest.fixture(autouse=True)
def empty_queue_after_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that failed while its job ran would leave that job holding the node, and every
    later test's job would wait behind it: cancel what a test left queued or running."""
    yield
    if "slurm_cluster" in request.fixturenames:
        cluster: SlurmCluster = request.getfixturevalue("slurm_cluster")
        cluster.cancel_all_jobs()
