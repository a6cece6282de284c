"""A faust app whose "seek back to committed offsets" always moves the position.

Faust clears the queues of its streams when it resumes after a rebalance or a table
recovery (``clear_on_resume``): records already fetched but not yet handled are thrown
away, and faust counts on seeking every stream partition back to its committed offset
to fetch them again. aiokafka's ``seek_to_committed`` seeks only a partition whose
committed offset is above 0; a partition with nothing committed yet (or 0) keeps its
position, past the records just thrown away, and they are never read.

Seen in the flows coordinator: a coordinator killed before its first commit
on a partition; the next one fetched that partition's START and three node outcomes
while it finished its recovery, handled the START, lost the three outcomes when faust
resumed, and the flow run waited forever (faust-streaming#216 reports the same kind of
skipped offsets after a rebalance). Here such partitions are sought to their beginning,
where ``auto_offset_reset=earliest`` would have started them: the thrown-away records
are read again (the coordinator's steps are replay-safe).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver
from faust.types import TP

log = logging.getLogger("cronstream.flows")


def never_committed(committed: Mapping[TP, int | None], streamed: set[str]) -> list[TP]:
    """The partitions of ``streamed`` topics that aiokafka's ``seek_to_committed``
    leaves where they are: nothing committed, or 0."""
    return [tp for tp, offset in committed.items() if not offset and tp.topic in streamed]


class _SeekingThread(driver.AIOKafkaConsumerThread):
    async def seek_to_committed(self) -> Mapping[TP, int]:
        return await self.call_thread(self._seek_to_committed)  # type: ignore[no-any-return]

    async def _seek_to_committed(self) -> Mapping[TP, int]:
        consumer = self._ensure_consumer()
        committed: Mapping[TP, int] = await consumer.seek_to_committed()
        streamed = {tp.topic for tp in committed if self.app.topics.acks_enabled_for(tp.topic)}
        rewind = never_committed(committed, streamed)
        if rewind:
            log.info(
                "nothing committed yet on %s: read from the beginning",
                ", ".join(sorted(f"{tp.topic}[{tp.partition}]" for tp in rewind)),
            )
            await consumer.seek_to_beginning(*rewind)
        return committed


def gap_at_head(committed: int | None, acked: list[int], gaps: Any) -> bool:
    """Whether the next offset to commit is missing: ``committed`` (the next offset to
    read, as faust stores it) was never acknowledged, nor is it in a gap faust knows of
    (offsets with no record), while later ones were."""
    if committed is None or not acked:
        return False
    return min(acked) > committed and not gaps.overlaps(committed)


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> _SeekingThread:
        return _SeekingThread(self, loop=self.loop, beacon=self.beacon)

    async def perform_seek(self) -> None:
        """faust's seek to the committed offsets, with nothing fetched on either side of
        it thrown away. After a recovery faust resumes the stream partitions while its
        flow is already on (it read the changelogs), seeks, then resumes its flow
        control, which empties the streams' queues: what was fetched after the seek
        went with it and was never fetched again, and a read offset set by a record
        in flight when the seek reset it made the fetcher drop the record at the
        committed offset (a flow run left RUNNING after a graceful coordinator restart:
        its node's outcome, at the committed offset, never handled). So: the
        flow stopped and the fetcher idle first, the queues emptied, then the seek; the
        caller turns the flow on again (the recovery, after this), and what it fetches
        from then on is from the committed offsets."""
        self.stop_flow()
        await self.wait_for_stopped_flow()
        self.app.flow_control.clear()
        await driver.Consumer.perform_seek(self)

    def _new_offset(self, tp: TP) -> int | None:
        """faust's choice of the offset to commit, never past an offset not yet
        handled. faust 0.15.3 takes its committed offset for the last one handled (it is
        the next one to read) and does not look at all when it is 0: with 10 committed
        and only 11 acknowledged it commits 12, and the event at 10, thrown away from a
        queue at a resume (``clear_on_resume``) or not yet handled, is never read again
        (a flow run left RUNNING after a coordinator restart)."""
        if gap_at_head(self._committed_offset[tp], self._acked[tp], self._gap[tp]):
            return None
        offset: int | None = driver.Consumer._new_offset(self, tp)
        return offset


class _Transport(driver.Transport):
    Consumer = _Consumer


class SeekingApp(faust.App):
    """``faust.App`` with the consumer above (its producer transport is faust's own)."""

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)
