package io.rota.client;

import java.util.Locale;

/** Where a workflow instance is, or how it ended. */
public enum InstanceStatus {
  /** Some step is pending or running. */
  RUNNING,
  /** Every step succeeded or was skipped. */
  SUCCEEDED,
  /** A step failed and nothing runs any more. */
  FAILED,
  /** Cancelled: its pending steps were cancelled and its running ones killed. */
  CANCELLED,
  /** A status this client does not know (a newer server's). */
  UNKNOWN;

  /**
   * The name the API uses.
   *
   * @return e.g. {@code running}
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
  public static InstanceStatus fromWire(String name) {
    for (InstanceStatus s : values()) {
      if (s != UNKNOWN && s.wireName().equals(name)) {
        return s;
      }
    }
    return UNKNOWN;
  }
}
