package io.rota.client;

import java.util.Locale;

/** Where a step of a workflow instance is, or how it ended. */
public enum StepStatus {
  /** Waiting for the steps it runs after. */
  PENDING,
  /** Its task was created and has not ended. */
  RUNNING,
  /** Its task (every element's, for a mapped step) succeeded. */
  SUCCEEDED,
  /** Its task ended {@code dead} (or the step could not be run, see its message). */
  FAILED,
  /** Its {@code when} condition can no longer hold. */
  SKIPPED,
  /** The instance was cancelled before it ended. */
  CANCELLED,
  /** A status this client does not know (a newer server's). */
  UNKNOWN;

  /**
   * The name the API uses.
   *
   * @return e.g. {@code skipped}
   */
  public String wireName() {
    return name().toLowerCase(Locale.ROOT);
  }

  /**
   * The status the API calls {@code name}.
   *
   * @param name e.g. {@code succeeded}
   * @return the status, {@link #UNKNOWN} for a name this client does not know
   */
  public static StepStatus fromWire(String name) {
    for (StepStatus s : values()) {
      if (s != UNKNOWN && s.wireName().equals(name)) {
        return s;
      }
    }
    return UNKNOWN;
  }
}
