package io.rota.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Objects;

/**
 * How to pull: {@link #defaults()} takes one task, leases it for 30 s and does not wait;
 * {@code PullOptions.builder().max(10).lease(Duration.ofMinutes(1)).maxWait(Duration.ofSeconds(20))
 * .consumer("billing-1").build()} long-polls for up to ten. Values are checked by the server
 * (a 422 names the field). Immutable.
 */
public final class PullOptions {
  private final Integer max;
  private final Long leaseMs;
  private final Long waitMs;
  private final String consumer;

  private PullOptions(Builder b) {
    this.max = b.max;
    this.leaseMs = b.leaseMs;
    this.waitMs = b.waitMs;
    this.consumer = b.consumer;
  }

  /**
   * The server's defaults: one task, a 30 s lease, no waiting.
   *
   * @return the options
   */
  public static PullOptions defaults() {
    return builder().build();
  }

  /**
   * Options to fill in.
   *
   * @return a builder
   */
  public static Builder builder() {
    return new Builder();
  }

  /** How long the server may hold the request, in milliseconds (0 if it answers at once). */
  long waitMillis() {
    return waitMs == null ? 0 : Math.max(0, waitMs);
  }

  ObjectNode toJson() {
    ObjectNode json = Json.object();
    if (max != null) {
      json.put("max", max);
    }
    if (leaseMs != null) {
      json.put("lease_ms", leaseMs);
    }
    if (waitMs != null) {
      json.put("wait_ms", waitMs);
    }
    if (consumer != null) {
      json.put("consumer", consumer);
    }
    return json;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof PullOptions)) {
      return false;
    }
    PullOptions p = (PullOptions) o;
    return Objects.equals(max, p.max) && Objects.equals(leaseMs, p.leaseMs)
        && Objects.equals(waitMs, p.waitMs) && Objects.equals(consumer, p.consumer);
  }

  @Override
  public int hashCode() {
    return Objects.hash(max, leaseMs, waitMs, consumer);
  }

  @Override
  public String toString() {
    return "PullOptions" + toJson();
  }

  /** Builds {@link PullOptions}. Not thread-safe. */
  public static final class Builder {
    private Integer max;
    private Long leaseMs;
    private Long waitMs;
    private String consumer;

    private Builder() {}

    /**
     * At most this many tasks (1 to 1,000; 1 by default).
     *
     * @param max the most tasks to take
     * @return this builder
     */
    public Builder max(int max) {
      this.max = max;
      return this;
    }

    /**
     * How long each task is held before it is delivered again unless acked, nacked or extended
     * (1 s to 12 h; 30 s by default).
     *
     * @param lease the lease (millisecond precision)
     * @return this builder
     */
    public Builder lease(Duration lease) {
      this.leaseMs = lease.toMillis();
      return this;
    }

    /**
     * How long to wait for a task to fall due when none is ready (up to 30 s; 0 by default).
     * The request's timeout is the client's plus this.
     *
     * @param wait the longest wait (millisecond precision)
     * @return this builder
     */
    public Builder maxWait(Duration wait) {
      this.waitMs = wait.toMillis();
      return this;
    }

    /**
     * The consumer's name, shown as its runs' executor {@code pull:<consumer>}.
     *
     * @param consumer up to 100 characters
     * @return this builder
     */
    public Builder consumer(String consumer) {
      this.consumer = consumer;
      return this;
    }

    /**
     * The options.
     *
     * @return immutable {@link PullOptions}
     */
    public PullOptions build() {
      return new PullOptions(this);
    }
  }
}
