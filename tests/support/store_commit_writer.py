"""A writer process for the group-commit SIGKILL test: commits records from many
concurrent tasks forever, printing each key only after its commit returned."""

from __future__ import annotations

import asyncio
import itertools
import sys

from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore


async def main(path: str) -> None:
    store = TrajectoryStore(path)
    numbers = itertools.count()

    async def writer() -> None:
        while True:
            key = f"k{next(numbers)}"
            record = GroupRecord(key=key, env="e", task_id=key, group=None, status="failed",
                                 error="x", attempts=1)  # fmt: skip
            await store.commit(record)
            sys.stdout.write(key + "\n")
            sys.stdout.flush()

    await asyncio.gather(*(writer() for _ in range(64)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
