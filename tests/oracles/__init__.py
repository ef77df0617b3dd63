"""Numpy references of gradkit's attacks, test oracles only: each imports what it shares (schedules,
starts, patterns) from the runtime module it checks, never the reverse."""
