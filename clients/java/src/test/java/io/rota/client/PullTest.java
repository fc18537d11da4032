package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** Pull delivery by hand: pull, ack, nack, extend, batch ack, against a real server. */
@ExtendWith(RotaServerExtension.class)
class PullTest {

  @Test
  void pullAndAck(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    Task task = rota.createTask(NewTask.builder(job).payload("hello").key("k-ack").build());
    PulledTask item = Pulls.pullOne(rota, job);
    assertEquals(task.id(), item.task());
    assertEquals(1, item.attempt());
    assertEquals(Optional.of("hello"), item.payload());
    assertEquals(Optional.of("k-ack"), item.key());
    assertFalse(item.lease().isEmpty());
    assertTrue(item.leaseExpiresAt().isAfter(item.dueAt().plusSeconds(20)), item.toString());
    assertEquals(TaskStatus.RUNNING, rota.getTask(task.id()).status());

    Task acked = rota.ack(item.task(), item.lease());
    assertEquals(TaskStatus.SUCCEEDED, acked.status());
    assertEquals(TaskStatus.SUCCEEDED, rota.getTask(task.id()).status());

    // The attempt has ended: its lease is stale, a 409 that changes nothing.
    RotaApiException stale = assertThrows(RotaApiException.class, () -> rota.ack(item.task(), item.lease()));
    assertEquals(409, stale.status());
    assertTrue(stale.isLeaseLost());
    assertTrue(stale.error().contains("lease"), stale.error());
    assertEquals(TaskStatus.SUCCEEDED, rota.getTask(task.id()).status());

    JsonNode runs = server.runsOf(task.id());
    assertEquals(1, runs.size());
    assertEquals("succeeded", runs.get(0).get("status").asText());
  }

  @Test
  void anExpiredLeaseIsStaleAndTheTaskComesAgain(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    Task task = rota.createTask(NewTask.of(job));
    PulledTask first = Pulls.pullOne(rota, job, Duration.ofSeconds(1));
    // Not acked: the lease expires and the task is delivered again, as attempt 2.
    PulledTask second = Pulls.pullOne(rota, job);
    assertEquals(task.id(), second.task());
    assertEquals(2, second.attempt());
    RotaApiException stale = assertThrows(RotaApiException.class, () -> rota.ack(first.task(), first.lease()));
    assertTrue(stale.isLeaseLost());
    assertEquals(TaskStatus.SUCCEEDED, rota.ack(second.task(), second.lease()).status());
  }

  @Test
  void nackedTasksAreRetried(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    Task task = rota.createTask(NewTask.builder(job).payload("p").build());
    PulledTask item = Pulls.pullOne(rota, job);
    Instant before = Instant.now();
    Task nacked = rota.nack(item.task(), item.lease(), "warehouse closed", Duration.ofMillis(1500));
    assertEquals(TaskStatus.FAILED, nacked.status());
    assertEquals(1, nacked.attempts());
    assertFalse(nacked.dueAt().isBefore(before.plusMillis(1400)), nacked.toString());

    PulledTask again = Pulls.pullOne(rota, job);
    assertEquals(task.id(), again.task());
    assertEquals(2, again.attempt());
    assertFalse(Instant.now().isBefore(nacked.dueAt()), "pulled before its retry was due");
    assertEquals(TaskStatus.SUCCEEDED, rota.ack(again.task(), again.lease()).status());

    JsonNode runs = server.runsOf(task.id());
    List<String> byAttempt = new ArrayList<>();
    runs.forEach(r -> byAttempt.add(r.get("attempt").asInt() + ":" + r.get("status").asText()
        + (r.get("message").isNull() ? "" : ":" + r.get("message").asText())));
    byAttempt.sort(null);
    assertEquals(List.of("1:failed:warehouse closed", "2:succeeded"), byAttempt);

    // The job allows 2 attempts: a nack of the last one makes the task dead.
    Task last = rota.createTask(NewTask.of(job));
    for (int attempt = 1; attempt <= 2; attempt++) {
      PulledTask p = Pulls.pullOne(rota, job);
      assertEquals(attempt, p.attempt());
      Task after = rota.nack(p.task(), p.lease(), "no", Duration.ZERO);
      assertEquals(attempt == 1 ? TaskStatus.FAILED : TaskStatus.DEAD, after.status());
    }
    assertEquals(TaskStatus.DEAD, rota.getTask(last.id()).status());
  }

  @Test
  void anExtendedLeaseIsStillHeldPastItsFirstEnd(RotaClient rota, RotaServer server)
      throws InterruptedException {
    String job = server.newPullJob();
    Task task = rota.createTask(NewTask.of(job));
    PulledTask item = Pulls.pullOne(rota, job, Duration.ofSeconds(1));
    Instant newEnd = rota.extend(item.task(), item.lease(), Duration.ofMinutes(1));
    assertTrue(newEnd.isAfter(item.leaseExpiresAt().plusSeconds(50)), newEnd.toString());
    // Past the first end (and the server's expiry check): still held, nothing to pull.
    Thread.sleep(2500);
    assertEquals(List.of(), Pulls.pullNow(rota, job));
    assertEquals(TaskStatus.SUCCEEDED, rota.ack(item.task(), item.lease()).status());
    assertEquals(1, rota.getTask(task.id()).attempts());

    RotaApiException stale = assertThrows(RotaApiException.class,
        () -> rota.extend(item.task(), item.lease(), Duration.ofMinutes(1)));
    assertTrue(stale.isLeaseLost());
    RotaApiException range = assertThrows(RotaApiException.class,
        () -> rota.extend(item.task(), item.lease(), Duration.ofMillis(10)));
    assertEquals(422, range.status());
    assertEquals(Optional.of("lease_ms"), range.field());
  }

  @Test
  void batchAckReportsEachItem(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    List<Long> ids = rota.createTasks(List.of(NewTask.builder(job).payload("0").build(),
        NewTask.builder(job).payload("1").build(), NewTask.builder(job).payload("2").build()));
    List<PulledTask> items = Pulls.pullN(rota, job, 3);
    assertEquals(ids.stream().sorted().collect(Collectors.toList()),
        items.stream().map(PulledTask::task).sorted().collect(Collectors.toList()));
    PulledTask first = items.get(0);
    assertEquals(TaskStatus.SUCCEEDED, rota.ack(first.task(), first.lease(), "{\"done\":true}").status());

    List<AckItem> acks = items.stream().map(AckItem::of).collect(Collectors.toList());
    acks.set(2, acks.get(2).withOutput(Map.of("n", 2)));
    acks.add(AckItem.of(999_999_999L, "nope"));
    List<AckResult> results = rota.ackBatch(job, acks);
    assertEquals(List.of(new AckResult(first.task(), "stale"), new AckResult(items.get(1).task(), "acked"),
        new AckResult(items.get(2).task(), "acked"), new AckResult(999_999_999L, "not_found")), results);
    assertEquals(List.of(AckResult.Status.STALE, AckResult.Status.ACKED, AckResult.Status.ACKED,
        AckResult.Status.NOT_FOUND), results.stream().map(AckResult::status).collect(Collectors.toList()));
    for (long id : ids) {
      assertEquals(TaskStatus.SUCCEEDED, rota.getTask(id).status());
    }
  }
}
