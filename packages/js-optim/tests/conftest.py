import sys
from pathlib import Path

# The tests' shared models live beside them; importlib mode does not put this folder on the path.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_finish(session):
    """torch's first optimizer imports ``torch._dynamo`` (3-6 s): import it at collection, when
    the test modules imported torch, so that no test counts it as its own time. (torch's one
    thread is tools/pytest_torch.py's, for every suite.)"""
    if "torch" in sys.modules:
        import torch._dynamo  # noqa: F401
