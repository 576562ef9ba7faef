"""Every test tree: the hypothesis profiles, registered before pytest loads one."""

import tests.support.tiers  # noqa: F401 - registers the "fast" profile of `make test-unit`
