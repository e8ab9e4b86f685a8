"""The documentation site runs: every code block, the strict build, and a real browser.

Run with ``hatch run docs:test`` (an environment with every js distribution, torch and MkDocs).
"""

from __future__ import annotations

import functools
import http.server
import importlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import docblocks  # noqa: E402


def _import_the_pages_libraries() -> None:
    """Import what the pages import, once, at collection: jax and flax (behind ``import js``)
    took getting-started.md, the first page and two imports, 6.8 s on an idle 2-core machine;
    orbax (the first checkpoint) and grain (the data pipelines) about 1 s each, in the first
    page to use them. A page's own imports still run; they find the modules loaded. A library
    that is not installed is left for its page to fail on."""
    libraries = ("js", "js.nn", "js.losses", "js.optim", "js.training", "orbax.checkpoint", "grain")
    for name in libraries:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


_import_the_pages_libraries()

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SITE = ROOT / "build" / "site"
ARTIFACTS = ROOT / "build" / "docs-artifacts"
PAGES = docblocks.pages(DOCS)


# ------------------------------------------------------------------------ the block reader
def test_blocks_pair_code_with_output_and_skips():
    text = (
        "```python\nprint(1)\n```\n\n```output\n1\n```\n"
        "<!-- skip: needs a GPU -->\n```python\nboom()\n```\n```bash\nls\n```\n"
    )
    first, second = docblocks.blocks(text)
    assert (first.source, first.output, first.skip) == ("print(1)\n", "1\n", None)
    assert (second.output, second.skip) == (None, "needs a GPU")


def test_block_reader_refuses_a_skip_without_reason_and_a_stray_output():
    with pytest.raises(ValueError, match="needs a reason"):
        docblocks.blocks("<!-- skip: -->\n```python\nx\n```\n")
    with pytest.raises(ValueError, match="must follow a ```python block"):
        docblocks.blocks("text\n```output\n1\n```\n")
    with pytest.raises(ValueError, match="never closed"):
        docblocks.blocks("```python\nx = 1\n")


@pytest.mark.parametrize(
    ("shown", "got", "same"),
    [
        ("loss 0.6931", "loss 0.69314718", True),  # more digits printed than shown
        ("loss 0.6931", "loss 0.6932", True),  # one unit in the last shown place
        ("loss 0.6931", "loss 0.6934", False),
        ("(8, 10) float32", "(8, 10) float32", True),
        ("(8, 10)", "(8, 9)", False),  # integers match exactly
        ("Error: ... Fix: pass rngs", "Error: a long message. Fix: pass rngs", True),
        ("1.5e-06", "1.5000001e-06", True),
        ("a\nb  \n\n", "a\nb", True),
    ],
)
def test_output_rule(shown, got, same):
    assert docblocks.output_matches(shown, got) is same


# ------------------------------------------------------------------------- the pages run
def _run_page(page: Path, workdir: Path) -> tuple[int, int]:
    devices = docblocks.cpu_devices(page.read_text())
    if devices is None:
        ran, skipped, problem = docblocks.run_page(page, workdir)
    else:  # a process of its own, started with the page's device count
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
        )
        done = subprocess.run(
            [sys.executable, "-W", "error", str(Path(docblocks.__file__)), str(page), str(workdir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        ran, skipped, problem = result["ran"], result["skipped"], result["problem"]
    if problem:
        pytest.fail(problem)
    return ran, skipped


DEVICES_PAGE = "scaling.md"  # the default run's one page on simulated devices
# Pages whose blocks start a child Python themselves: process tests that stay in the default
# run, each the only check of its page (inference.md runs an exported model without js).
CHILD_PAGES = {"inference.md"}
# Pages whose blocks take well over the default run's 5 s per test (training runs, model
# comparisons): the full tier's. After editing one, or what it shows, run
# `hatch run docs:test -m ''`.
SLOW_PAGES = {"fine-tuning.md", "from-pytorch.md", "nn.md", "core.md"}


def _page_param(page: Path):
    """A page that runs in a process of its own (its simulated devices) is a process test, and
    slow unless it is DEVICES_PAGE; a page of SLOW_PAGES is slow."""
    if page.name in SLOW_PAGES:
        return pytest.param(page, marks=pytest.mark.slow)
    if docblocks.cpu_devices(page.read_text()) is None:
        if page.name in CHILD_PAGES:
            return pytest.param(page, marks=pytest.mark.process)
        return page
    if page.name == DEVICES_PAGE:
        return pytest.param(page, marks=pytest.mark.process)
    return pytest.param(page, marks=[pytest.mark.process, pytest.mark.slow])


@pytest.mark.parametrize(
    "page", [_page_param(p) for p in PAGES], ids=[str(p.relative_to(DOCS)) for p in PAGES]
)
def test_page_blocks_run_and_print_what_they_show(page, tmp_path):
    ran, skipped = _run_page(page, tmp_path)
    assert ran + skipped > 0


def test_skipped_blocks_are_few():
    skips = [
        (page.relative_to(DOCS), b.skip)
        for page in PAGES
        for b in docblocks.blocks(page.read_text())
        if b.skip
    ]
    total = sum(len(docblocks.blocks(p.read_text())) for p in PAGES)
    print(f"\n{total} code blocks on {len(PAGES)} pages; {len(skips)} skipped: {skips}")
    assert len(skips) <= max(3, total // 10), skips


# -------------------------------------------------------------------------- strict build
@functools.cache
def _build() -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],  # --quiet hid griffe warnings
        cwd=ROOT,
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    return time.perf_counter() - start


@pytest.mark.process  # mkdocs runs in a child Python (once: the tests below reuse its site)
def test_site_builds_strictly():
    seconds = _build()
    print(f"\nmkdocs build --strict: {seconds:.1f} s")
    assert (SITE / "index.html").is_file()


@pytest.mark.process
def test_api_reference_lists_every_public_name():
    import importlib

    _build()
    pages = {
        "js-core": ["js"],
        "js-nn": ["js.nn", "js.nn.functional"],
        "js-losses": ["js.losses"],
        "js-optim": ["js.optim"],
        "js-train": ["js.training", "js.training.steps"],
    }
    reexported = {"Module", "ModuleList", "ModuleDict", "Parameter", "Buffer"}
    missing = []
    for page, modules in pages.items():
        html = (SITE / "api" / page / "index.html").read_text()
        for name in modules:
            module = importlib.import_module(name)
            public = getattr(module, "__all__", None) or [
                n
                for n, v in vars(module).items()
                if callable(v)
                and not n.startswith("_")
                and getattr(v, "__module__", "").startswith(name)
            ]
            for member in public:
                value = getattr(module, member)
                if (
                    member.startswith("__")
                    or member in reexported
                    or type(value).__name__ == "module"
                ):
                    continue
                # Another library's function re-exported as it is (js.split is nnx.split) has
                # no docstring of ours: the page must describe it by name instead.
                foreign = not getattr(value, "__module__", "js").startswith("js")
                if f'id="{name}.{member}"' not in html and not (
                    foreign and f"<code>{name}.{member}</code>" in html
                ):
                    missing.append(f"{name}.{member} (api/{page}.md)")
    assert not missing, f"public names without an API entry: {missing}"


# ------------------------------------------------------------------------------- browser
def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def served_site():
    _build()
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002  (the base class's name)
        pass


def _chromium_run(url: str, *flags: str) -> str:
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        *flags,
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(_chromium() is None, reason="no chromium on PATH (apt-get install chromium)")
@pytest.mark.parametrize(
    ("path", "title"),
    [
        ("", "js"),  # the default run's one page in the browser
        pytest.param("lessons/compiled-steps/", "Compiled steps", marks=pytest.mark.slow),
        pytest.param("api/js-nn/", "js-nn", marks=pytest.mark.slow),
    ],
)
@pytest.mark.process  # headless Chromium: a multi-process browser, started twice per page
def test_pages_render_in_a_real_browser(served_site, path, title):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    url = f"{served_site}/{path}"
    # --virtual-time-budget lets the theme's scripts run before the DOM is dumped.
    dom = _chromium_run(url, "--virtual-time-budget=3000", "--dump-dom")
    assert f"<title>{title}" in dom, dom[:500]
    assert 'class="md-nav' in dom, "the navigation did not render"
    assert "<pre" in dom and "<code" in dom, "no code block rendered"
    shot = ARTIFACTS / f"{path.strip('/').replace('/', '_') or 'home'}.png"
    _chromium_run(url, "--virtual-time-budget=3000", f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000
