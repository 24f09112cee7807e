"""Mutation harness: single-line mutants of the protocol core, each of which the tests must kill.

Each mutant names one line (or part of one) of ``src/`` that a guarantee rests on and a plausible wrong version of
it. For each: ``src/`` is copied to a temporary folder, the mutant applied there, and the tests that guard it run
against the copy (``PYTHONPATH`` = the copy and ``tests/``) with the interpreter running this script. A mutant is
KILLED when a guarding test fails, SURVIVED when they all pass: the tests no longer notice that defect.

Usage (from anywhere; the project's virtual environment's python):

    python scripts/mutants.py            # the guarding tests once unmutated, beside every mutant
    python scripts/mutants.py --list     # the mutants, their files and guarding tests
    python scripts/mutants.py --only NAME [--only NAME ...]
    python scripts/mutants.py --jobs 1   # one mutant at a time (default: as many as cores, at most 4)

Exit status: 0 when every mutant selected was killed; 1 when one survived, no longer applies (its original text is
not found exactly once: the list has rotted and must follow the code), or its tests could not run (a test id that
no longer exists, a collection error), or the guarding tests fail on the unmutated code; 2 for bad arguments.

Rule: whenever a defect is found in the core, add the mutant that reintroduces it, with the test that now kills it.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
TESTS = ROOT / "tests"
#: seconds one mutant's tests may run before the mutant is reported as ERROR (a hang is no kill)
TIMEOUT_S = 300


@dataclass(frozen=True)
class Mutant:
    """One single-line defect: ``original`` (exact text, found exactly once in ``file``) becomes ``replacement``.

    ``file`` is relative to ``src/``; ``tests`` are pytest node ids or files relative to the repository root.
    """

    name: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    reason: str


_COORD = "tests/test_coordinator.py"
_NO_LOSS = "tests/test_no_loss.py"
_STORE = "tests/test_store_contract.py"
_HISTORY = "tests/test_history.py"
_MAINT = "tests/test_maintenance.py"
_TIMING = "tests/test_timing_safety.py"

MUTANTS: tuple[Mutant, ...] = (
    # -- the entry builder (decisions.py) -------------------------------------------------------------------------
    Mutant(
        "builder-ignores-epoch", "coordinator/decisions.py",
        "if meta is None or meta.pid != req.pid or meta.epoch != req.epoch:",
        "if meta is None or meta.pid != req.pid:",
        (f"{_COORD}::test_a_fenced_producers_commit_decided_after_its_fence_in_one_entry_is_rejected[memory]",
         f"{_COORD}::test_a_fenced_producers_abort_intent_decided_after_its_fence_is_rejected[memory]"),
        "G3: a fenced producer's commit or abort is decided in the entry that fences it"),
    Mutant(
        "duplicate-sequence-kept", "coordinator/decisions.py",
        "if s.seq < want:", "if s.seq < 0:",
        (f"{_COORD}::test_sequence_numbers_drop_duplicates_and_refuse_gaps[memory]",),
        "G2: a retried send whose sequence number is committed is published twice"),
    Mutant(
        "sequence-gap-accepted", "coordinator/decisions.py",
        "if s.seq > want:", "if s.seq > want + 1:",
        (f"{_COORD}::test_sequence_numbers_drop_duplicates_and_refuse_gaps[memory]",),
        "G2: a lost send (a gap in sequence numbers) is committed over instead of refused"),
    Mutant(
        "app-version-replay-commits", "coordinator/decisions.py",
        "if am is not None and req.version <= am.version:", "if am is not None and req.version < am.version:",
        (f"{_COORD}::test_two_attempts_at_one_application_version_decided_in_one_entry_commit_once[memory]",),
        "G2: two attempts at one application version decided in one entry both commit"),
    Mutant(
        "reaped-attempt-commits", "coordinator/decisions.py",
        "(req.version, req.token) in am.reaped and req.tid is None:",
        "(req.version, req.token) in () and req.tid is None:",
        (f"{_COORD}::test_an_attempt_reaped_earlier_in_an_entry_cannot_commit_later_in_it[memory]",),
        "G1: an attempt GC reaped (its files go next) commits later in the same entry"),
    Mutant(
        "offsets-from-log-start", "coordinator/decisions.py",
        "PartAssign(t, p, st.partition(t, p).end, tuple(ms))", "PartAssign(t, p, st.partition(t, p).start, tuple(ms))",
        (f"{_COORD}::test_commit_publishes_atomically_with_dense_offsets_in_commit_order[memory]",),
        "G4: a commit's offsets are assigned from the partition's start, reusing committed offsets"),
    # -- replaying decisions (state.py) ---------------------------------------------------------------------------
    Mutant(
        "offsets-not-advanced", "coordinator/state.py",
        "_evolve(pm, end=part.base + part.rows)", "_evolve(pm, end=part.base)",
        (f"{_COORD}::test_commit_publishes_atomically_with_dense_offsets_in_commit_order[memory]",),
        "G4: a commit's rows do not move the partition's end, so the next commit reuses their offsets"),
    Mutant(
        "fencing-abort-keeps-epoch", "coordinator/state.py",
        "replace(meta, epoch=meta.epoch + 1, state=TxnState.COMPLETE_ABORT,",
        "replace(meta, epoch=meta.epoch, state=TxnState.COMPLETE_ABORT,",
        (f"{_COORD}::test_timeout_sweep_aborts_with_epoch_bump_even_with_skewed_clocks[memory]",),
        "G3: the timeout sweep's abort does not fence the producer, which commits on as a zombie"),
    # -- the commit point (groupcommit.py) --------------------------------------------------------------------------
    Mutant(
        "lost-race-taken-as-won", "coordinator/groupcommit.py",
        "if not self.store.put_if_absent(txn_log_path(seq), entry.to_bytes()):",
        "if self.store.put_if_absent(txn_log_path(seq), entry.to_bytes()) is None:",
        (f"{_COORD}::test_commit_publishes_atomically_with_dense_offsets_in_commit_order[memory]",),
        "G1: a writer whose entry lost the race to another writer's takes its decisions as made"),
    # -- the transaction log (txnlog.py) ---------------------------------------------------------------------------
    Mutant(
        "records-in-memory-forgotten-at-checkpoints", "coordinator/txnlog.py",
        "if s > seq or s in self._recent}", "if s > seq}",
        (f"{_COORD}::test_a_writer_checkpointing_partitions_computes_the_records_it_decided_instead_of_reading_them"
         "[memory]",),
        "cost: a writer reads back, one request at a time, every partition record a coordinator checkpoint covers "
        "when it next checkpoints that partition"),
    Mutant(
        "records-map-outlives-its-entries", "coordinator/txnlog.py",
        "del self._record_seq[key]", "pass",
        (f"{_COORD}::test_the_records_a_log_view_can_compute_are_bounded_by_the_entries_it_keeps_in_memory[memory]",),
        "memory: a long-lived view's map of computable partition records grows with every entry it reads"),
    Mutant(
        "truncation-deletes-kept-entry", "coordinator/txnlog.py",
        "if n is not None and n < keep:", "if n is not None and n <= keep:",
        (f"{_HISTORY}::test_log_truncation_keeps_the_entry_its_checkpoint_ends_at_for_stale_views",),
        "G1: a stale view of a quiet truncated log lists nothing and reuses a deleted entry's number"),
    Mutant(
        "stale-view-applies-unlinked-entry", "coordinator/logfollow.py",
        "if entry is None or not self._links(entry):", "if entry is None:",
        (f"{_TIMING}::test_a_reader_whose_view_a_truncation_passed_by_never_takes_ghosts_for_the_log",),
        "a view older than a truncation applies entries that do not follow on from it (ghosts filling the freed "
        "numbers, or the entries after a gap) instead of jumping to the checkpoint"),
    Mutant(
        "created-entry-taken-unproven", "coordinator/logproof.py",
        "            verdict = self._verdict(entry)\n        except StoreError as exc:\n            raise Commit",
        "            verdict = True\n        except StoreError as exc:\n            raise Commit",
        (f"{_TIMING}::test_a_producer_paused_inside_a_read_of_the_log_never_writes_under_a_freed_number",
         f"{_TIMING}::test_a_ghost_linked_by_the_local_store_after_a_pause_is_not_accepted"),
        "G5: an entry created under a number a truncation freed is acknowledged; no reader ever sees it"),
    Mutant(
        "checkpoint-window-trusted", "coordinator/logproof.py",
        "                return tok == entry.writer\n        try:", "                return True\n        try:",
        (f"{_TIMING}::test_a_committer_paused_inside_its_entry_write_is_never_acknowledged_for_a_ghost",),
        "G5: a checkpoint that names another token for the entry's number is taken to prove a ghost"),
    Mutant(
        "reader-ignores-links", "coordinator/logproof.py",
        "return not entry.prev or not tok or entry.prev == tok", "return True",
        (f"{_TIMING}::test_a_reader_whose_view_a_truncation_passed_by_never_takes_ghosts_for_the_log",),
        "G1: a reader whose view a truncation passed by applies ghosts that fill the freed numbers"),
    Mutant(
        "fenced-epoch-answered-fenced", "coordinator/decisions.py",
        'if req.n > last or (req.n == last and how == "fenced"):', "if True:",
        (f"{_TIMING}::test_a_fenced_answer_is_given_only_when_the_log_proves_the_transaction_was_not_committed",),
        "G5: a transaction committed before its epoch was fenced is answered fenced, and its files deleted"),
    Mutant(
        "fenced-epochs-forgotten", "coordinator/state.py",
        "return next(((n, o) for e, n, o in self.fenced if e == epoch), (-1, None))", "return None",
        (f"{_TIMING}::test_a_zombie_many_epochs_behind_is_told_fenced_from_the_state_alone",
         f"{_TIMING}::test_a_fenced_answer_is_given_only_when_the_log_proves_the_transaction_was_not_committed"),
        "G3: a zombie of a fenced epoch is answered unknown, or fenced for a transaction that committed"),
    Mutant(
        "attempt-not-counted-as-waiting", "coordinator/groupcommit.py",
        "            self._waited.setdefault(req.id, self.state.seq)\n            while len(self._waited)",
        "            pass\n            while len(self._waited)",
        (f"{_TIMING}::test_a_commit_whose_entry_reply_was_lost_is_never_answered_fenced_after_a_truncation_and_expiry",),
        "G5/G7: a commit whose entry's reply was lost, truncated since with its producer expired, is answered fenced"),
    Mutant(
        "by-name-answer-trusted-after-a-pause", "coordinator/logfollow.py",
        "if nxt is None and not self._unproven and time.monotonic() - self._refreshed < recent_s():",
        "if nxt is None and not self._unproven:",
        (f"{_TIMING}::test_a_read_whose_request_paused_before_the_store_applied_it_sees_what_was_acknowledged",),
        "a read misses a commit acknowledged while its by-name request paused before the store applied it"),
    Mutant(
        "recency-from-the-end-of-a-paused-read", "coordinator/logfollow.py",
        "self._refreshed = started  # answered within the window",
        "self._refreshed = time.monotonic()  # answered within the window",
        (f"{_TIMING}::test_a_by_name_answer_counts_as_recent_from_when_it_was_asked_not_from_when_it_arrived",),
        "a read begun after the recency window misses an acknowledged commit: a late by-name answer stamped recency"),
    Mutant(
        "rebuild-forgets-lost-fences", "coordinator/logrebuild.py",
        "        if tid in named or (kept is not None and (kept.pid, kept.epoch) == (meta.pid, meta.epoch)):",
        "        if True:",
        ("tests/test_damage.py::test_a_fence_only_the_damaged_entry_held_stays_a_fence_after_repair",),
        "G3: a zombie an init only the damaged entry held had fenced commits again after the entry is rebuilt"),
    Mutant(
        "repair-removes-under-last-checkpoint", "coordinator/logrepair.py",
        "above = [c for c in lg.numbered if c > o.seq and c in lg.entries]",
        "above = [c for c in lg.checkpoints if c >= o.seq]",
        ("tests/test_damage.py::test_repair_log_rebuilds_a_covered_entry_only_when_its_checkpoint_confirms_it",),
        "the repair frees an entry number no numbered checkpoint lies above: a ghost created there could be proven"),
    Mutant(
        "rebuild-ignores-staged-copies", "coordinator/logrebuild.py",
        "extra = staged.parts_of(txn, scratch)", "extra = []",
        ("tests/test_damage.py::test_repair_log_completes_a_commit_from_its_staged_files_where_its_record_was_never_"
         "written",),
        "G1/G2: a rebuilt commit misses the partition whose record was never written: the transaction is torn"),
    Mutant(
        "compaction-deletes-on-refusal", "coordinator/maintenance/compaction.py",
        "            break  # the layout moved: plan again on the next pass",
        "            coord.store.delete(path); break  # the layout moved: plan again on the next pass",
        ("tests/test_maintenance.py::test_a_refused_compaction_never_deletes_its_merged_file_and_gc_does_once_no_"
         "replace_can_publish_it",),
        "G1: a compaction told anything but done deletes a merged file an entry it created may have published"),
    Mutant(
        "rebuild-trusts-staged-rows", "coordinator/logrebuild.py",
        "        if not ops or ops[-1].base + sum(m.rows for m in ops[-1].segments) != end:",
        "        if not ops:",
        ("tests/test_damage.py::test_repair_log_refuses_staged_files_that_do_not_end_where_the_next_record_starts",),
        "G2: a stray staged file is published into a rebuilt commit whose offsets then overlap the next record's"),
    Mutant(
        "ack-before-second-copy", "coordinator/coordinator.py",
        "                self.log.secure_records(out.seq, out.item)",
        "                pass",
        ("tests/test_damage.py::test_a_commit_is_acknowledged_only_once_its_partition_records_hold_a_second_copy",
         f"{_NO_LOSS}::test_commit_past_its_commit_point_is_never_reported_failed_when_its_records_cannot_be_written"),
        "G5: a commit is acknowledged while its log entry is its only copy (one damaged entry takes it away)"),
    Mutant(
        "records-taken-as-found", "coordinator/logcheckpoint.py",
        "if marker_path(r.topic, r.partition, r.idx) not in self._records_found]",
        "if False]",
        ("tests/test_damage.py::test_a_commit_is_acknowledged_only_once_its_partition_records_hold_a_second_copy",),
        "G5: a committer acknowledges a commit whose partition records it never found nor wrote"),
    Mutant(
        "read-ahead-applies-unlinked-entry", "coordinator/logfollow.py",
        "if not isinstance(entry, LogEntry) or not self._links(entry):",
        "if not isinstance(entry, LogEntry):",
        ("tests/test_serving.py::test_entries_read_ahead_are_applied_only_while_each_links_to_the_one_before"
         "[memory]",),
        "G1/G5: an entry read ahead that does not name the one before it (a ghost) is applied as the log's"),
    Mutant(
        "early-intents-listing-fails-commit", "coordinator/groupcommit.py",
        "except TxnLogError:  # only a listing made early: this try makes its own",
        "except ZeroDivisionError:  # only a listing made early: this try makes its own",
        ("tests/test_serving.py::test_a_failed_listing_of_intents_made_while_staging_does_not_fail_the_commit"
         "[memory]",),
        "G7: a store error of a listing made ahead of time (even in another life of the process) fails the commit"),
    Mutant(
        "pipelined-commit-lists-after-staging", "coordinator/producer.py",
        "        self._check_inflight()\n        self.coordinator.log.list_intents_ahead()",
        "        self._check_inflight()",
        ("tests/test_commit_overlap.py::test_a_pipelined_commit_lists_the_waiting_intents_while_its_rows_are_staged"
         "[memory]",),
        "cost: a pipelined commit lists the waiting intents only after staging (a round trip more to its entry)"),
    Mutant(
        "listing-ahead-waits-for-the-log", "coordinator/groupcommit.py",
        "        with self._ahead_lock:\n            if self._intents_ahead is None:",
        "        with self._lock:\n            if self._intents_ahead is None:",
        ("tests/test_pipelined.py::test_a_failed_async_commit_aborts_every_later_one_in_flight_and_the_producer_"
         "resyncs[memory]",),
        "liveness: a pipelined commit waits for the log's lock, held by the try of the commit before it"),
    Mutant(
        "own-entry-not-a-read", "coordinator/groupcommit.py",
        "max(self._refreshed, self._appended_at) < JUST_READ_S",
        "self._refreshed < JUST_READ_S",
        ("tests/test_commit_overlap.py::test_a_first_try_right_after_this_process_created_the_newest_entry_does_not_"
         "read_the_log_again[memory]",),
        "cost: a first try right after this process created the newest entry reads the log again first"),
    Mutant(
        "outcome-from-unproven-view", "coordinator/txnlog.py",
        "        if self._unproven and not self._prove():\n            return None\n        seen = self._decisions",
        "        seen = self._decisions",
        ("tests/test_history.py::test_a_commit_retried_after_a_refresh_that_failed_half_way_never_answers_from_"
         "unproven_entries",),
        "G7/G8: a retry answered from entries a failed refresh applied but never proved: fenced for a commit"),
    Mutant(
        "new-pid-taken-for-memory-of-the-old", "coordinator/txnlog.py",
        "forgotten = tid is not None and (meta is None or meta.pid != getattr(req, \"pid\", None))",
        "forgotten = tid is not None and meta is None",
        ("tests/test_history.py::test_a_commit_retried_after_an_unknown_outcome_never_guesses_fenced"
         "[expired, then a new pid]",),
        "G7: a commit decided before its id expired and was initialised again (new pid) is answered fenced"),
    Mutant(
        "hook-inside-a-try-hands-over", "coordinator/serving.py",
        "if self._serving_thread == me or me in self._deciders or not (self._serving or self._trying)",
        "if self._serving_thread == me or not (self._serving or self._trying)",
        ("tests/test_serving.py::test_a_request_made_inside_a_try_of_the_same_thread_is_decided_there_not_handed_"
         "over[memory]",),
        "liveness: a request made inside a try of the same thread waits for a serving thread that waits for its lock"),
    Mutant(
        "threads-take-the-log-in-turn", "coordinator/serving.py",
        "if self._serving_thread == me or me in self._deciders or not (self._serving or self._trying)",
        "if self._serving_thread == me or me in self._deciders or not self._serving",
        ("tests/test_serving.py::test_threads_of_one_process_share_entries_instead_of_taking_the_log_lock_in_turn"
         "[memory]",),
        "throughput: threads of one process sharing a coordinator take the log's lock in turn, one entry each"),
    Mutant(
        "refresh-shares-an-older-read", "coordinator/txnlog.py",
        "and not self._unproven and self._refreshed > asked:",
        "and not self._unproven and self._refreshed > asked - 60.0:",
        ("tests/test_serving.py::test_a_refresh_shares_another_threads_read_only_when_that_read_began_after_it"
         "[memory]",),
        "G5: a refresh right after another returns the older view, missing a commit acknowledged before it began"),
    Mutant(
        "read-by-name-ending-on-a-free-number-unproven", "coordinator/logfollow.py",
        "if not (found < len(got) and got[found] is None and self._prove()):",
        "if not (found < len(got) and got[found] is None):",
        (f"{_TIMING}::test_a_read_by_name_that_ends_on_a_freed_number_after_a_ghost_does_not_take_the_ghost_for_"
         "the_log",),
        "G1/G5: a read by name that ends on a free number returns the entries it read unproven (maybe a ghost)"),
    Mutant(
        "read-ahead-error-taken-for-no-entry", "coordinator/logfollow.py",
        "                raise\n            return exc\n",
        "                raise\n            return None\n",
        (f"{_TIMING}::test_a_read_by_name_whose_second_read_fails_still_sees_the_entry_there",),
        "G5: a read by name whose read ahead failed on the store takes the error for no entry and skips the listing, "
        "missing an acknowledged commit"),
    Mutant(
        "refresh-returns-unproven-view", "coordinator/logfollow.py",
        "if nxt is None and not self._unproven and time.monotonic() - self._refreshed < recent_s():",
        "if nxt is None and time.monotonic() - self._refreshed < recent_s():",
        ("tests/test_history.py::test_a_refresh_after_one_that_failed_half_way_never_returns_the_unproven_view",),
        "G1/G5: a refresh after one that failed half way returns the entries it applied unproven (maybe a ghost)"),
    Mutant(
        "pipelined-commit-after-an-abort", "coordinator/decisions.py",
        '        if req.after >= 0 and meta.last_outcome != "committed" and not req.abort:',
        '        if req.after >= 0 and meta.last_outcome not in ("committed", "aborted") and not req.abort:',
        ("tests/test_pipelined.py::test_a_chain_of_pipelined_commits_after_an_aborted_transaction_is_aborted_whole"
         "[memory]",),
        "G2: a pipelined commit n + 1 commits after n aborted, and a read-process-write job loses n's input"),
    Mutant(
        "pipelined-decided-before-its-earlier", "coordinator/decisions.py",
        "    return meta is not None and meta.pid == req.pid and meta.epoch == req.epoch and meta.last_txn < req.after",
        "    return False",
        ("tests/test_pipelined.py::test_a_pipelined_commit_sent_first_commits_once_the_one_it_follows_commits"
         "[memory-processes]",),
        "G2: a pipelined commit sent first is refused as skipping a number instead of waiting for the one it follows"),
    Mutant(
        "pipelined-request-answered-noop", "coordinator/groupcommit.py",
        "            if waits(req, self.state):\n",
        "            if False:\n",
        ("tests/test_pipelined.py::test_a_pipelined_commit_sent_first_commits_once_the_one_it_follows_commits"
         "[memory-processes]",),
        "G5: a pipelined commit whose earlier transaction is undecided is answered as having nothing to decide"),
    Mutant(
        "pipelined-waiter-serves-nobody", "coordinator/groupcommit.py",
        "                if not (queue or fetch):\n",
        "                if False:\n",
        ("tests/test_pipelined.py::test_a_commit_behind_one_refused_undecided_is_decided_though_that_ones_abort_first_"
         "fails[memory-12]",),
        "G6: a commit pipelined behind one refused undecided waits out its budget: the abort deciding that one is an "
        "intent only waiters are left to decide"),
    Mutant(
        "retry-store-error-says-undecided", "coordinator/groupcommit.py",
        "                if tried:  # not",
        "                if False:  # not",
        ("tests/test_history.py::test_a_commit_retried_after_a_refresh_that_failed_half_way_never_answers_from_"
         "unproven_entries",),
        "G7: a retry whose refresh fails says StoreError (not decided) for a request an earlier try may have decided"),
    Mutant(
        "served-answer-waits-for-the-whole-entry", "coordinator/serving.py",
        "self._write_records(entry, answers.written)", "self._write_records(entry)",
        ("tests/test_serving.py::test_a_served_commit_is_answered_once_its_own_partitions_records_exist_not_the_"
         "whole_entrys[memory]",),
        "latency: every caller of a served round waits for the slowest partition record of the whole entry"),
    Mutant(
        "served-answer-before-its-records", "coordinator/serving.py",
        "return {(p.topic, p.partition) for p in item.parts if p.rows} if isinstance(item, CommitItem) else set()",
        "return set()",
        ("tests/test_serving.py::test_a_served_commit_is_answered_once_its_own_partitions_records_exist_not_the_"
         "whole_entrys[memory]",),
        "G5: a served commit is acknowledged before its partition records (its second copy) exist"),
    Mutant(
        "records-written-unknown-to-their-callers", "coordinator/logcheckpoint.py",
        "self._record_found(marker_path(rec.topic, rec.partition, rec.idx))", "pass",
        ("tests/test_serving.py::test_a_served_commit_is_answered_once_its_own_partitions_records_exist_not_the_"
         "whole_entrys[memory]",),
        "cost: a caller answered early reads back the partition records this process has just written"),
    Mutant(
        "staging-reads-the-log-while-serving", "coordinator/sending.py",
        "if not self._inflight.undecided() and not (at_commit and (self.coordinator.serving_here",
        "if not self._inflight.undecided() and not (at_commit and (False",
        ("tests/test_serving.py::test_a_commit_handed_to_this_processs_serving_thread_reads_nothing_of_the_log_"
         "itself[memory]",),
        "cost: every commit of a serving process reads the log and holds its lock against the serving thread"),
    Mutant(
        "answered-commit-tries-directly", "coordinator/groupcommit.py",
        "straight = answerable and not tried and self.answered_lately and not self._serving", "straight = False",
        ("tests/test_answers.py::test_a_producer_answered_lately_sends_its_commit_straight_to_the_queue_and_is_still_"
         "fenced[memory]",),
        "cost: a commit on a busy log another process serves reads every entry since its view to find intents waiting"),
    Mutant(
        "answered-commit-reads-the-log", "coordinator/sending.py",
        "or self.coordinator.answered_lately)):", "or False)):",
        ("tests/test_answers.py::test_a_producer_answered_lately_sends_its_commit_straight_to_the_queue_and_is_still_"
         "fenced[memory]",),
        "cost: a commit on a busy log another process serves reads every entry since its view before queueing"),
    Mutant(
        "serving-thread-hands-to-itself", "coordinator/serving.py",
        "if self._serving_thread == me or me in self._deciders or not (self._serving or self._trying)",
        "if me in self._deciders or not (self._serving or self._trying)",
        ("tests/test_serving.py::test_the_serving_thread_never_hands_a_request_to_itself[memory]",),
        "liveness: a request submitted on the serving thread waits for that thread (itself) until the budget ends"),
    Mutant(
        "replay-acks-before-second-copy", "coordinator/coordinator.py",
        "            self._secure_earlier(req)",
        "            pass",
        ("tests/test_damage.py::test_a_replay_answered_already_committed_first_secures_the_records_of_the_commit_it_"
         "acknowledges",),
        "G5: a replay answered already committed acknowledges a commit whose log entry is its only copy"),
    Mutant(
        "rebuild-ignores-later-bases", "coordinator/logmissing.py",
        "            end = later_base(later, tp)\n",
        "            end = None\n",
        ("tests/test_damage.py::test_repair_log_finds_a_commit_no_record_names_from_its_staged_files_and_the_"
         "entries_after_it",),
        "G8: an entry whose records are missing, with later entries whose records are missing too, is not rebuilt"),
    Mutant(
        "rebuild-finds-no-unrecorded-commit", "coordinator/logrebuild.py",
        "        order.append((\"c\", txn, -1, -1))",
        "        pass",
        ("tests/test_damage.py::test_repair_log_finds_a_commit_no_record_names_from_its_staged_files_and_the_"
         "entries_after_it",),
        "G8: a commit no record names stops every reader though its staged files and the later entries hold it"),
    Mutant(
        "rebuild-forgets-lost-compactions", "coordinator/logrebuild.py",
        "    quiet = layout_only(before, lacking, notes.assumed)",
        "    quiet: list[RetainItem] = []",
        ("tests/test_damage.py::test_repair_log_keeps_a_lost_compaction_as_a_change_of_no_row",),
        "G8: a damaged entry whose compaction record is missing stops every reader though nothing of it is lost"),
    Mutant(
        "rebuild-ignores-compacted-parts", "coordinator/logstaged.py",
        "            if tp not in files and (merged := self._compacted(txn, tp, state.partition(*tp).end)) is not "
        "None:",
        "            if tp not in files and (merged := None) is not None:",
        ("tests/test_damage.py::test_repair_log_takes_a_compacted_part_of_an_unrecorded_commit_from_the_compaction_"
         "that_retired_it",),
        "G8: a commit part a later compaction merged and GC deleted stops the repair though the replace names it"),
    Mutant(
        "sink-commit-deletes-on-fenced", "txnsink/batch.py",
        "result = coord.commit(self.ident, self.txn, segs, app=app, end_producer=self.ephemeral)",
        "result = coord.commit(self.ident, self.txn, segs, app=app, end_producer=self.ephemeral) if "
        "delete_segments(coord.store, segs) >= 0 else None",
        (f"{_TIMING}::test_a_fenced_answer_is_given_only_when_the_log_proves_the_transaction_was_not_committed",),
        "G5: the batch sink deletes the staged files before its commit is decided"),
    # -- stores ---------------------------------------------------------------------------------------------------
    Mutant(
        "memory-put-if-absent-overwrites", "coordinator/backends/memory.py",
        "if path in self._objects:", "if False:",
        (f"{_STORE}::test_put_if_absent_creates_once[memory]",),
        "every commit point: a conditional create that overwrites another writer's object"),
    Mutant(
        "local-lost-race-wins", "coordinator/backends/local.py",
        "return self._read_back_equal(path, data)", "return True",
        (f"{_STORE}::test_put_if_absent_creates_once[local]",),
        "every commit point: a writer that lost the race to create an object is told it won"),
    Mutant(
        "local-data-not-fsynced", "coordinator/backends/local.py",
        "os.fsync(fh.fileno())", "pass",
        (f"{_NO_LOSS}::test_local_store_fsyncs_each_files_data_before_it_becomes_visible",),
        "G5: after a power loss a committed entry's name can point at data that never reached the disk"),
    Mutant(
        "local-folder-not-fsynced", "coordinator/backends/local.py",
        "        os.fsync(fd)\n", "        pass\n",
        (f"{_NO_LOSS}::test_local_store_fsyncs_the_folder_entry_of_every_write",),
        "G5: after a power loss a committed entry's name (the link) can be gone"),
    Mutant(
        "s3-unconditional-create", "coordinator/backends/s3.py",
        'Body=body, IfNoneMatch="*")', "Body=body)",
        (f"{_STORE}::test_put_if_absent_creates_once[s3]",),
        "every commit point: S3's create without If-None-Match overwrites another writer's entry"),
    # -- reading --------------------------------------------------------------------------------------------------
    Mutant(
        "uncommitted-read-repeats-committed", "coordinator/reader.py",
        "not in published and staged_file(path)]", "not in published or staged_file(path)]",
        (f"{_COORD}::test_hung_transaction_does_not_block_later_commits[memory]",),
        "read_uncommitted returns committed records a second time, as if staged by an open transaction"),
    Mutant(
        "merged-output-read-as-staged", "coordinator/reader.py",
        "return txn is not None and parse_txn_id(txn) is not None", "return txn is not None",
        ("tests/test_read_uncommitted.py::test_read_uncommitted_never_returns_a_compactions_merged_rows_as_staged[memory]",),
        "read_uncommitted returns a compaction's merged rows (committed ones) a second time, with null offsets"),
    # -- maintenance ----------------------------------------------------------------------------------------------
    Mutant(
        "gc-deletes-open-transaction", "coordinator/maintenance/gc.py",
        "(meta.epoch == ref.epoch and ref.n <= meta.last_txn)",
        "(meta.epoch == ref.epoch and ref.n <= meta.last_txn + 1)",
        (f"{_MAINT}::test_gc_deletes_only_unreferenced_files_past_the_grace_period[memory]",),
        "G1: GC deletes the staged files of a producer's open transaction, which then commits onto nothing"),
    Mutant(
        "gc-deletes-without-reaping", "coordinator/maintenance/gc.py",
        "elif not dry_run and coord.abort_app(ref.app, ref.version, ref.token, reason=\"reaped by GC\"):",
        "elif not dry_run:",
        (f"{_NO_LOSS}::test_gc_reaps_an_abandoned_stream_attempt_before_deleting_it[memory]",),
        "G1: GC deletes an application attempt's staged files without making the attempt uncommittable"),
    Mutant(
        "in-flight-failure-first-to-arrive", "coordinator/inflight.py",
        "if self.failed is None or order < self._failed_at:",
        "if self.failed is None:",
        ("tests/test_pipelined.py::test_the_failure_kept_for_the_caller_is_the_earliest_commits_not_the_first_to_"
         "arrive",),
        "reporting: a producer whose commits in flight failed names a commit aborted behind the cause, not the cause"),
    Mutant(
        "gc-reaps-a-committed-producer-txn", "coordinator/maintenance/gc.py",
        "reaped[txn] = out.status == \"aborted\"",
        "reaped[txn] = out.status != \"rejected\"",
        ("tests/test_maintenance.py::test_gc_keeps_the_files_of_a_transaction_whose_commit_wins_the_race_with_its_"
         "reaping[memory]",),
        "G1/G5: GC deletes the staged files of a producer transaction whose commit won the race with its reaping"),
    Mutant(
        "gc-reaps-a-running-batch-job", "coordinator/maintenance/gc.py",
        "if coord.store.exists(open_path(txn)):",
        "if False:",
        (f"{_NO_LOSS}::test_gc_never_deletes_the_staged_files_of_a_running_job_however_old[memory]",),
        "G1: GC aborts a running batch job (its transaction has an open record) and deletes its staged files"),
    Mutant(
        "gc-reaps-a-producer-txn-within-its-timeout", "coordinator/maintenance/gc.py",
        "if open_meta is None or age <= open_meta.timeout_ms:",
        "if open_meta is None:",
        ("tests/test_maintenance.py::test_gc_reaps_a_transaction_that_staged_at_commit_and_never_reached_the_log"
         "[memory]",),
        "liveness: GC aborts, fencing its producer, a transaction still within its timeout"),
    Mutant(
        "retry-after-a-lost-race-decides-its-own", "coordinator/groupcommit.py",
        "fresh=attempt == 0 or soon, fetch=not wrote_intent or soon,",
        "fresh=attempt == 0 or soon, fetch=not wrote_intent,",
        ("tests/test_serving.py::test_the_first_writer_to_retry_after_a_lost_race_decides_every_intent_it_lists"
         "[memory]",),
        "latency: writers that lost one race each decide their own request in an entry of their own, then all serve"),
    Mutant(
        "serving-thread-races-another-processs", "coordinator/serving.py",
        "                if self._written_by_another():\n                    # the try of this process lost",
        "                if False:\n                    # the try of this process lost",
        ("tests/test_serving.py::test_a_serving_thread_started_for_handed_requests_joins_another_processs_serving_"
         "instead_of_racing_it[memory]",
         "tests/test_serving.py::test_a_serving_thread_started_for_handed_requests_reads_no_intent_when_another_"
         "process_wrote_the_newest_entry[memory]"),
        "latency: processes starting at once each start a serving thread, read every intent and race for every "
        "entry (seconds without an entry)"),
    Mutant(
        "fresh-process-threads-try-in-turn", "coordinator/serving.py",
        "                    or (not self._serving and self._served_by_another()):",
        "                    or (not self._serving and self._written_by_another()):",
        ("tests/test_serving.py::test_threads_of_a_fresh_process_committing_at_once_are_served_together_once_one_"
         "of_them_wins[memory]",),
        "latency: threads of a fresh process committing at once each try the log in turn, one entry each"),
    Mutant(
        "quick-retry-reads-every-intent", "coordinator/groupcommit.py",
        "limit = QUICK_RETRY_INTENTS if soon else None", "limit = None",
        ("tests/test_serving.py::test_the_quick_retry_after_a_lost_race_reads_only_the_oldest_intents_and_its_"
         "writer_serves_the_rest[memory]",),
        "cost: every writer that lost one race reads every intent waiting before its one quick retry"),
    Mutant(
        "close-leaves-the-queue-to-a-take-over", "coordinator/producer.py",
        "            self.coordinator.log.wind_down()", "            pass",
        ("tests/test_serving.py::test_closing_a_producer_whose_process_serves_the_queue_decides_the_intents_waiting_"
         "before_it_returns[memory]",),
        "latency: a process exiting while it serves the queue leaves the intents waiting to an idle take-over"),
    Mutant(
        "wind-down-stops-at-a-listing-made-before-it", "coordinator/serving.py",
        "(empty and self._wind_down_from <= looked_from)", "(empty and self._wind_down_from < float(\"inf\"))",
        ("tests/test_serving.py::test_closing_a_producer_whose_process_serves_the_queue_decides_the_intents_waiting_"
         "before_it_returns[memory]",),
        "latency: a closing process stops serving on a listing made before an intent it could decide was written"),
    Mutant(
        "wind-down-unbounded", "coordinator/serving.py",
        "while time.monotonic() < min(until, self._wind_down_at):", "while time.monotonic() < until:",
        ("tests/test_serving.py::test_closing_a_producer_stops_its_serving_in_bounded_time_while_intents_keep_"
         "coming[memory]",),
        "liveness: closing a producer whose process serves a queue that never empties blocks for the whole serving"),
    Mutant(
        "pipelined-handed-back-while-its-earlier-waits", "coordinator/serving.py",
        "keep = [h for h in handed if h.req.id not in done and waits(h.req, self.state)]",
        "keep = [h for h in handed if h.req.id not in done and False]",
        ("tests/test_serving.py::test_a_pipelined_request_handed_over_stays_with_the_serving_thread_until_its_"
         "earlier_one_is_decided[memory]",),
        "latency: the serving process's pipelined commits fall back to intents, each behind the one before"),
    Mutant(
        "waiter-reads-the-log-while-its-process-serves", "coordinator/groupcommit.py",
        "if self._refreshed <= looked and not self._serving:", "if self._refreshed <= looked:",
        ("tests/test_serving.py::test_a_request_waiting_as_an_intent_reads_no_log_while_its_process_serves_the_"
         "queue[memory]",),
        "latency: a request of the serving process waiting as an intent holds the log's lock against its rounds"),
    Mutant(
        "waiter-takes-over-a-slow-log", "coordinator/groupcommit.py",
        "time.monotonic() - moved_at < min(TAKE_OVER_MAX_S, 3 * self._entry_gap):",
        "time.monotonic() - moved_at < 0.0:",
        ("tests/test_serving.py::test_a_waiter_takes_over_a_slow_log_only_once_it_stood_still_for_several_of_its_"
         "gaps[memory]",),
        "throughput: on a machine short of CPU, waiters take over a slow log after a few looks and race its server"),
    Mutant(
        "waiter-leaves-its-answered-intent", "coordinator/groupcommit.py",
        "parallel.background(functools.partial(self._delete_quietly, [intent_path(req.id)]))", "pass",
        ("tests/test_serving.py::test_a_waiting_request_learns_its_outcome_from_the_answer_over_its_intent_without_"
         "reading_the_log[memory]",),
        "cost: every answered intent stays until a writer lists it long after (a request per commit, later)"),
    Mutant(
        "decided-intent-left-behind-for-good", "coordinator/intentqueue.py",
        "        self._clear_decided(decided)\n", "        del decided\n",
        ("tests/test_serving.py::test_a_decided_intent_left_behind_is_deleted_by_the_next_writer_that_lists_it_long_"
         "enough_after[memory]",),
        "cost: an intent whose waiter died before deleting it is listed by every serving round for good"),
    Mutant(
        "failed-intent-delete-never-retried", "coordinator/intentqueue.py",
        "self._cleared.pop(paths[path], None)", "pass",
        ("tests/test_serving.py::test_a_decided_intent_left_behind_is_deleted_by_the_next_writer_that_lists_it_long_"
         "enough_after[memory]",),
        "cost: an intent whose delete failed is listed by every serving round of its writer's process for good"),
    Mutant(
        "recent-answer-deleted", "coordinator/intentqueue.py",
        "if known[1] <= st.seq - ANSWER_KEPT_ENTRIES:", "if True:",
        ("tests/test_serving.py::test_a_decided_intent_left_behind_is_deleted_by_the_next_writer_that_lists_it_long_"
         "enough_after[memory]",),
        "cost: a writer listing an answer its waiter has not read yet deletes it, sending the waiter to the log"),
    Mutant(
        "answer-before-records", "coordinator/serving.py",
        "answered = [item for item, parts in self._intents if not parts]",
        "answered = [item for item, parts in self._intents]",
        ("tests/test_answers.py::test_an_intent_is_answered_only_once_the_records_of_its_partitions_exist[memory]",),
        "G5: a waiter acknowledges a commit whose records do not exist yet: one damaged entry takes it away"),
    Mutant(
        "answer-checksum-unchecked", "coordinator/answers.py",
        "if d.get(\"v\") != FORMAT_VERSION or crc != _crc(d):", "if d.get(\"v\") != FORMAT_VERSION:",
        ("tests/test_answers.py::test_an_answer_is_taken_only_by_its_own_request_and_only_undamaged",
         "tests/test_answers.py::test_a_waiter_whose_answer_is_lost_or_unusable_learns_its_outcome_from_the_log"
         "[memory-damaged]"),
        "G1: a damaged answer that is still valid JSON is taken for the decision (a wrong entry, or outcome)"),
    Mutant(
        "answer-of-another-request-taken", "coordinator/answers.py",
        "if item.request != rid:", "if False:",
        ("tests/test_answers.py::test_an_answer_is_taken_only_by_its_own_request_and_only_undamaged",
         "tests/test_answers.py::test_a_waiter_whose_answer_is_lost_or_unusable_learns_its_outcome_from_the_log"
         "[memory-another's]"),
        "G1: a waiter takes another request's answer found at its path for its own outcome"),
    # -- the state's producers by pid (state.py) ---------------------------------------------------------------
    Mutant(
        "pid-index-keeps-a-dropped-producer", "coordinator/state.py",
        "            del self._tid_by_pid[meta.pid]\n            # a pid is held",
        "            pass\n            # a pid is held",
        ("tests/test_state_index.py",),
        "G3: a pid whose producer expired names the producer its id came back as, judged by that one's epoch"),
    Mutant(
        "pid-index-keeps-an-old-pid", "coordinator/state.py",
        "        if old is not None and old.pid != meta.pid and self._tid_by_pid.get(old.pid) == meta.tid:",
        "        if False:",
        ("tests/test_state_index.py",),
        "G3: an id given a new pid still answers for its old one"),
    Mutant(
        "pid-index-not-copied", "coordinator/state.py",
        "        st._tid_by_pid = dict(self._tid_by_pid)",
        "        pass",
        ("tests/test_state_index.py",),
        "G3: a copied state (every entry a writer builds) knows no producer by pid"),
)


@dataclass(frozen=True)
class Result:
    """What became of one mutant: KILLED, SURVIVED or ERROR (``detail`` says which test killed it, or why)."""

    mutant: Mutant
    status: str
    seconds: float
    detail: str
    output: str = ""


class MutantError(Exception):
    """A mutant that cannot be applied (its original text is not found exactly once)."""


def mutated(mutant: Mutant, text: str) -> str:
    """``text`` (the contents of ``mutant.file``) with ``mutant`` applied.

    Raises:
        MutantError: the original text is not found exactly once, or the mutated file does not compile.
    """
    count = text.count(mutant.original)
    if count != 1:
        raise MutantError(f"mutant {mutant.name}: {mutant.original!r} occurs {count} times in src/{mutant.file}, "
                          "expected exactly once (the code changed: update the mutant)")
    out = text.replace(mutant.original, mutant.replacement)
    try:
        compile(out, f"src/{mutant.file}", "exec")
    except SyntaxError as exc:
        raise MutantError(f"mutant {mutant.name}: src/{mutant.file} does not compile once mutated: {exc}") from exc
    return out


def apply(mutant: Mutant, src: Path) -> None:
    """Apply ``mutant`` to the copy of ``src/`` at ``src``.

    Raises:
        MutantError: the file is missing, or see :func:`mutated`.
    """
    path = src / mutant.file
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise MutantError(f"mutant {mutant.name}: file src/{mutant.file} does not exist") from None
    path.write_text(mutated(mutant, text))
    for stale in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):  # the unmutated file's byte code
        stale.unlink()


def check_all(mutants: tuple[Mutant, ...]) -> list[str]:
    """Why each mutant of ``mutants`` that no longer applies to ``src/`` does not (nothing is written)."""
    problems = []
    for m in mutants:
        try:
            mutated(m, (SRC / m.file).read_text())
        except FileNotFoundError:
            problems.append(f"mutant {m.name}: file src/{m.file} does not exist")
        except MutantError as exc:
            problems.append(str(exc))
    return problems


def compiled_src(dest: Path) -> Path:
    """A copy of ``src/`` under ``dest`` (without its byte code), compiled once; returns its path. The copies the
    tests run against are made from it, so a test process compiles only the mutated file, not all of ``src/``."""
    out = dest / "src"
    shutil.copytree(SRC, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    if not compileall.compile_dir(out, quiet=1):
        raise MutantError(f"src/ does not compile (copied to {out})")
    return out


def copy_src(compiled: Path, dest: Path) -> Path:
    """A copy of ``compiled`` (see :func:`compiled_src`) under ``dest``, byte code and file times included (the
    byte code stays valid for the files it was compiled from); returns its path."""
    out = dest / "src"
    shutil.copytree(compiled, out)
    return out


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(TESTS)])
    env.pop("PYTEST_ADDOPTS", None)
    return env


def imported_from(src: Path) -> str | None:
    """None when a test process imports the core from the copy at ``src``; else where it imports it from (an
    installed copy would hide every mutant)."""
    got = subprocess.run([sys.executable, "-c", "import coordinator; print(coordinator.__file__)"], cwd=ROOT,
                         env=_env(src), capture_output=True, text=True, check=False)
    where = got.stdout.strip()
    if got.returncode == 0 and Path(where).resolve().is_relative_to(src.resolve()):
        return None
    return f"a test process imports coordinator from {where or got.stderr.strip()!r}, not from the copy {src}"


def run_tests(src: Path, tests: tuple[str, ...], timeout: float) -> tuple[int | None, str]:
    """Run ``tests`` against the copy at ``src``; returns (pytest's exit code, None on timeout; its output)."""
    # Hypothesis's pytest plugin imports all of Hypothesis, most of a test process's start-up (one per mutant); a
    # guarding test that uses Hypothesis imports it itself
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-ra", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
           *tests]
    try:
        got = subprocess.run(cmd, cwd=ROOT, env=_env(src), capture_output=True, text=True, timeout=timeout,
                             check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        return None, out
    return got.returncode, got.stdout + got.stderr


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def judge(mutant: Mutant, compiled: Path, timeout: float) -> Result:
    """Apply ``mutant`` to a fresh copy of ``compiled`` (``src/``, see :func:`compiled_src`) and run its guarding
    tests."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        src = copy_src(compiled, Path(tmp))
        try:
            apply(mutant, src)
        except MutantError as exc:
            return Result(mutant, "ERROR", time.monotonic() - started, str(exc))
        code, out = run_tests(src, mutant.tests, timeout)
    took = time.monotonic() - started
    if code is None:
        return Result(mutant, "ERROR", took, f"tests still running after {timeout:.0f} s", out)
    if code == 0:
        return Result(mutant, "SURVIVED", took, "every guarding test passed", out)
    if code == 1:
        failed = _FAILED.search(out)
        return Result(mutant, "KILLED", took, failed.group(1) if failed else "a test failed", out)
    return Result(mutant, "ERROR", took, f"pytest exit code {code} (a test id gone, or collection failed)", out)


def baseline(mutants: tuple[Mutant, ...], compiled: Path, timeout: float) -> str | None:
    """Run the guarding tests of ``mutants`` on an unmutated copy of ``src/`` (a kill by a test that fails anyway
    means nothing); None when they pass, else what went wrong."""
    tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutant-baseline-") as tmp:
        code, out = run_tests(copy_src(compiled, Path(tmp)), tests, timeout)
    if code != 0:
        return f"the guarding tests fail on the unmutated code (pytest exit code {code}):\n{_tail(out)}"
    print(f"baseline: {len(tests)} guarding tests pass on the unmutated code ({time.monotonic() - started:.1f} s)")
    return None


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def print_list(mutants: tuple[Mutant, ...]) -> None:
    for m in mutants:
        print(f"{m.name}  (src/{m.file})\n    {m.original!r}\n -> {m.replacement!r}\n    why: {m.reason}")
        for t in m.tests:
            print(f"    guard: {t}")


def print_table(results: list[Result]) -> None:
    width = max(len("mutant"), *(len(r.mutant.name) for r in results))
    fwidth = max(len("file"), *(len(r.mutant.file) for r in results))
    print(f"{'mutant':<{width}}  {'file':<{fwidth}}  {'result':<8}  {'s':>6}  detail")
    for r in results:
        print(f"{r.mutant.name:<{width}}  {r.mutant.file:<{fwidth}}  {r.status:<8}  {r.seconds:6.1f}  {r.detail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this mutant (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip running the guarding tests on the unmutated code first")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per mutant (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                        help="mutants judged at once, each in its own copy and test process (default %(default)s)")
    args = parser.parse_args(argv)
    names = [m.name for m in MUTANTS]
    if len(set(names)) != len(names):
        print("mutant names are not unique", file=sys.stderr)
        return 1
    chosen = MUTANTS
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            print(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(names)}", file=sys.stderr)
            return 2
        chosen = tuple(m for m in MUTANTS if m.name in args.only)
    if args.list:
        print_list(chosen)
        return 0
    problems = check_all(chosen)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutant-src-") as tmp:
        try:
            compiled = compiled_src(Path(tmp))
        except MutantError as exc:
            print(exc, file=sys.stderr)
            return 1
        elsewhere = imported_from(compiled)
        if elsewhere is not None:
            print(elsewhere, file=sys.stderr)
            return 1
        from concurrent.futures import ThreadPoolExecutor

        results = []
        # the baseline runs beside the mutants (its tests mostly wait: pauses, the S3 server), judged before any
        # result counts
        with ThreadPoolExecutor(max_workers=1) as side, ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            checked = None if args.no_baseline else side.submit(baseline, chosen, compiled, args.timeout)
            for r in pool.map(lambda m: judge(m, compiled, args.timeout), chosen):
                print(f"{r.status:<8} {r.mutant.name} ({r.seconds:.1f} s)", flush=True)
                if r.status != "KILLED" and r.output:
                    print(_tail(r.output), flush=True)
                results.append(r)
            failed = None if checked is None else checked.result()
        if failed is not None:
            print(f"baseline: {failed}", file=sys.stderr)
            return 1
    print()
    print_table(results)
    bad = [r for r in results if r.status != "KILLED"]
    print(f"\n{len(results) - len(bad)} of {len(results)} mutants killed in {time.monotonic() - started:.1f} s"
          + (f"; not killed: {', '.join(r.mutant.name for r in bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
