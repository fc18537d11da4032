package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** Pulling in tests: tasks fall due through the scheduler's wheel, so wait for them. */
final class Pulls {
  /** Hang guard only: how long a test waits for tasks that should fall due within a second. */
  static final Duration PATIENCE = Duration.ofSeconds(20);

  private Pulls() {}

  /** Pulls until {@code n} tasks came (leases of {@code lease}, or the server's default). */
  static List<PulledTask> pullN(RotaClient client, String job, int n, Duration lease) {
    List<PulledTask> got = new ArrayList<>();
    long deadline = System.nanoTime() + PATIENCE.toNanos();
    while (got.size() < n) {
      long left = (deadline - System.nanoTime()) / 1_000_000;
      assertTrue(left > 0, "only " + got.size() + " of " + n + " tasks were pulled: " + got);
      PullOptions.Builder options =
          PullOptions.builder().max(n - got.size()).maxWait(Duration.ofMillis(Math.min(2000, left)));
      if (lease != null) {
        options.lease(lease);
      }
      got.addAll(client.pull(job, options.build()));
    }
    return got;
  }

  static List<PulledTask> pullN(RotaClient client, String job, int n) {
    return pullN(client, job, n, null);
  }

  static PulledTask pullOne(RotaClient client, String job) {
    return pullN(client, job, 1, null).get(0);
  }

  static PulledTask pullOne(RotaClient client, String job, Duration lease) {
    return pullN(client, job, 1, lease).get(0);
  }

  /** A single pull that takes nothing it finds: returns what a pull without waiting got. */
  static List<PulledTask> pullNow(RotaClient client, String job) {
    return client.pull(job, PullOptions.builder().max(10).build());
  }
}
