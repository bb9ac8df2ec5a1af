"""gtest_list.py — the tests a gtest binary would run under a filter, from its
--gtest_list_tests output (no test body runs, so no GPU is needed).

Shared by scripts/mutate.py (`check`: every command of the mutation suite must select a test)
and scripts/check_sanitize_filters.py (every pattern of the sanitizer's default filters must).
The filter is matched by gtest itself, so the answer is the one a real run would see.
"""
import subprocess


def selected_tests(exe, gtest_filter=None, timeout=120):
    """Full names ("Suite.Test", "Prefix/Suite.Test/param") of the tests `exe` selects under
    `gtest_filter` (None: every test). Raises RuntimeError when the listing fails."""
    cmd = [exe, "--gtest_list_tests"]
    if gtest_filter is not None:
        cmd.append(f"--gtest_filter={gtest_filter}")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{exe} --gtest_list_tests exited {p.returncode}: {p.stdout[-500:]}")
    names, suite = [], None
    for line in p.stdout.splitlines():
        if not line.strip() or line.startswith("Running main()"):
            continue
        if not line.startswith(" "):  # "Suite." (a typed suite adds "  # TypeParam = ...")
            suite = line.split("#", 1)[0].strip()
        elif suite:
            names.append(suite + line.split("#", 1)[0].strip())
    return names
