package io.rota.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Objects;

/**
 * How long a failed attempt waits before the next: {@link #fixed} or {@link #exponential}
 * ({@code base × factor^(attempt−1)}, at most {@code max}). A task without one uses its job's
 * (by default exponential from 1 s, factor 2, at most an hour). Immutable.
 */
public final class Backoff {
  private final String kind;
  private final long delayMs;
  private final long baseMs;
  private final double factor;
  private final long maxMs;
  private final boolean jitter;

  private Backoff(String kind, long delayMs, long baseMs, double factor, long maxMs, boolean jitter) {
    this.kind = kind;
    this.delayMs = delayMs;
    this.baseMs = baseMs;
    this.factor = factor;
    this.maxMs = maxMs;
    this.jitter = jitter;
  }

  /**
   * The same delay before every retry.
   *
   * @param delay the delay (millisecond precision)
   * @return the backoff
   */
  public static Backoff fixed(Duration delay) {
    return new Backoff("fixed", delay.toMillis(), 0, 0, 0, false);
  }

  /**
   * {@code base × factor^(attempt−1)}, at most {@code max}, without jitter: "1 min, then 2,
   * then 4" is {@code exponential(Duration.ofMinutes(1), 2, Duration.ofHours(1))}.
   *
   * @param base the first retry's delay
   * @param factor 1 to 100
   * @param max the longest delay (at least {@code base})
   * @return the backoff
   */
  public static Backoff exponential(Duration base, double factor, Duration max) {
    return new Backoff("exponential", 0, base.toMillis(), factor, max.toMillis(), false);
  }

  /**
   * This exponential backoff with each delay randomised ({@code jitter}), so that many tasks
   * failing together do not retry together.
   *
   * @return the backoff with jitter
   * @throws IllegalStateException for a fixed backoff, which has no jitter
   */
  public Backoff withJitter() {
    if (!"exponential".equals(kind)) {
      throw new IllegalStateException("only an exponential backoff has jitter");
    }
    return new Backoff(kind, delayMs, baseMs, factor, maxMs, true);
  }

  ObjectNode toJson() {
    ObjectNode json = Json.object().put("kind", kind);
    if ("fixed".equals(kind)) {
      json.put("delay_ms", delayMs);
    } else {
      json.put("base_ms", baseMs).put("factor", factor).put("max_ms", maxMs).put("jitter", jitter);
    }
    return json;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof Backoff)) {
      return false;
    }
    Backoff b = (Backoff) o;
    return kind.equals(b.kind) && delayMs == b.delayMs && baseMs == b.baseMs
        && Double.compare(factor, b.factor) == 0 && maxMs == b.maxMs && jitter == b.jitter;
  }

  @Override
  public int hashCode() {
    return Objects.hash(kind, delayMs, baseMs, factor, maxMs, jitter);
  }

  @Override
  public String toString() {
    return "Backoff" + toJson();
  }
}
