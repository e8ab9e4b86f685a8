"""js-nn's tests. jobs/ holds child-process scripts (one joins a 2-process job when imported):
they hold no test or doctest, so --doctest-modules (tools/run_suite.py) does not import them."""

collect_ignore = ["jobs"]
