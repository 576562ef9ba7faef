"""CPU seconds of a server's whole process tree, including children it reaped meanwhile.

A server's cost per message is the CPU its processes spend, not only its live workers':
php-fpm forks and reaps children with ``pm = dynamic``, gunicorn may restart a worker.
The CPU of a reaped child moves into its parent's ``children_user``/``children_system``,
so summing own + children times over every live process of the tree counts each CPU
second exactly once, before and after a child exits.
"""

from __future__ import annotations

import psutil


def tree_cpu_seconds(roots: list[int]) -> float:
    """user + system (own and of reaped children) of the roots and all their descendants."""
    total = 0.0
    seen: set[int] = set()
    for root in roots:
        try:
            top = psutil.Process(root)
            processes = [top, *top.children(recursive=True)]
        except psutil.Error:
            continue
        for process in processes:
            if process.pid in seen:
                continue
            seen.add(process.pid)
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue  # exited between listing and asking: its parent has its time now
            total += times.user + times.system + times.children_user + times.children_system
    return total


def own_cpu_seconds() -> float:
    """This process (all threads): the cost of work the bench does itself (ceilings, replikate)."""
    times = psutil.Process().cpu_times()
    return times.user + times.system
