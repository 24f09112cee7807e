package io.txnlog.spark;

/**
 * The offsets of one {@code readStream.format("txnlog")} query read by {@link TxnlogStream}: a Python object of
 * txnlog's planner process (the data source's own stream reader, created there), reached through py4j. Offsets
 * cross as the stream reader's JSON, so a checkpoint written by either stream is read by the other.
 *
 * <p>Every method may throw (a py4j error carrying the Python error's message): Spark then fails the query, as it
 * does when the Python stream's runner reports an error.
 */
public interface StreamCalls {
    /** Where a new query starts ({@code startingOffsets}). */
    String initialOffset();

    /** The limit the options ask for, as pyspark's read limit JSON ({@code {"_type": "ReadMaxRows", ...}}). */
    String defaultReadLimit();

    /** The end of the next micro-batch from {@code start} within {@code limit} (read limit JSON). */
    String latestOffset(String start, String limit);

    /** Fix the query's end at the topics' committed end now (Trigger.AvailableNow). */
    void prepareForTriggerAvailableNow();

    /** The topics' committed end at the latest snapshot taken, for progress reports; null when unknown. */
    String reportLatestOffset();

    /** Spark has processed every micro-batch up to {@code end} (the consumer group's offsets, if any). */
    void commit(String end);

    /** The query stops: release the store. */
    void stop();
}
