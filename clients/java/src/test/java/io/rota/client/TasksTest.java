package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** Producing: create, read, list, cancel, batches and re-drives, against a real server. */
@ExtendWith(RotaServerExtension.class)
class TasksTest {

  @Test
  void createGetAndCancelWithAnIdempotentKey(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    Instant before = Instant.now();
    Task first = rota.createTask(NewTask.builder(job).payload("{\"order_id\":42}")
        .delay(Duration.ofMinutes(1)).key("order-42").priority(5).build());
    assertTrue(first.created());
    assertEquals(TaskStatus.PENDING, first.status());
    assertEquals("pending", first.statusName());
    assertEquals("delayed", first.kind());
    assertEquals(Optional.of("order-42"), first.key());
    assertEquals(Optional.of("{\"order_id\":42}"), first.payload());
    assertEquals(5, first.priority());
    assertEquals(0, first.attempts());
    assertTrue(first.dueAt().isAfter(before.plusSeconds(50)), first.toString());
    assertTrue(first.createdAt().isPresent() && first.updatedAt().isPresent());

    Task again = rota.createTask(NewTask.builder(job).payload("other").delayMs(1).key("order-42").build());
    assertFalse(again.created());
    assertEquals(first.id(), again.id());
    assertEquals(Optional.of("{\"order_id\":42}"), again.payload());

    Task read = rota.getTask(first.id());
    assertEquals(first.id(), read.id());
    assertEquals(TaskStatus.PENDING, read.status());
    assertFalse(read.created());
    assertEquals(first.job(), read.job());

    Task cancelled = rota.cancelTask(first.id());
    assertEquals(TaskStatus.CANCELLED, cancelled.status());
    assertEquals(TaskStatus.CANCELLED, rota.getTask(first.id()).status());
    // Cancelling a cancelled task is idempotent.
    assertEquals(TaskStatus.CANCELLED, rota.cancelTask(first.id()).status());

    // A task due now, cancelled before any consumer pulled it, is never handed out.
    Task due = rota.createTask(NewTask.of(job));
    assertEquals(TaskStatus.CANCELLED, rota.cancelTask(due.id()).status());
    assertEquals(List.of(), rota.pull(job, PullOptions.builder().maxWait(Duration.ofMillis(1500)).build()));
  }

  @Test
  void createAtATimeWithItsOwnRetryPolicy(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    Instant at = Instant.now().plus(1, ChronoUnit.HOURS).truncatedTo(ChronoUnit.MILLIS);
    Task task = rota.createTask(NewTask.builder(job).runAt(at).maxAttempts(3)
        .backoff(Backoff.exponential(Duration.ofSeconds(1), 2, Duration.ofMinutes(1))).build());
    assertEquals(at, task.dueAt());
    assertEquals(OptionalInt.of(3), task.maxAttempts());
    assertEquals(Optional.empty(), task.payload());

    // By id too, and cancelled by its key.
    Task byId = rota.createTask(NewTask.builder(task.job()).delay(Duration.ofHours(1)).key("by-id").build());
    assertEquals(task.job(), byId.job());
    Task cancelled = rota.cancelTask(job, "by-id");
    assertEquals(byId.id(), cancelled.id());
    assertEquals(TaskStatus.CANCELLED, cancelled.status());
    rota.cancelTask(task.id());
  }

  @Test
  void listPagesNewestFirstWithFilters(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    List<Long> ids = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      ids.add(rota.createTask(NewTask.builder(job).delay(Duration.ofHours(1)).key("l-" + i).build()).id());
    }
    rota.cancelTask(ids.get(0));

    Page<Task> first = rota.listTasks(TaskQuery.builder().job(job).limit(2).build());
    assertEquals(List.of(ids.get(2), ids.get(1)), idsOf(first));
    assertTrue(first.next().isPresent());
    Page<Task> second = rota.listTasks(TaskQuery.builder().job(job).limit(2).after(first.next().get()).build());
    assertEquals(List.of(ids.get(0)), idsOf(second));
    assertEquals(Optional.empty(), second.next());

    assertEquals(List.of(ids.get(0)),
        idsOf(rota.listTasks(TaskQuery.builder().job(job).status(TaskStatus.CANCELLED).build())));
    assertEquals(List.of(ids.get(1)), idsOf(rota.listTasks(TaskQuery.builder().job(job).key("l-1").build())));
    assertEquals(List.of(),
        idsOf(rota.listTasks(TaskQuery.builder().job(job).dueBefore(Instant.now()).build())));
    assertEquals(List.of(ids.get(2), ids.get(1), ids.get(0)),
        idsOf(rota.listTasks(TaskQuery.builder().job(job).dueAfter(Instant.now()).build())));
    ids.subList(1, 3).forEach(rota::cancelTask);
  }

  private static List<Long> idsOf(Page<Task> page) {
    return page.items().stream().map(Task::id).collect(Collectors.toList());
  }

  @Test
  void batchIsAllOrNothingAndKeysYieldExistingTasks(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    Task existing = rota.createTask(NewTask.builder(job).delay(Duration.ofMinutes(1)).key("b-existing").build());
    List<Long> ids = rota.createTasks(List.of(
        NewTask.builder(job).payload("one").key("b-1").build(),
        NewTask.builder(job).payload("two").priority(7).build(),
        NewTask.builder(job).key("b-existing").build()));
    assertEquals(3, ids.size());
    assertEquals(existing.id(), ids.get(2));
    assertEquals(3, new HashSet<>(ids).size());
    assertEquals(Optional.of("one"), rota.getTask(ids.get(0)).payload());
    assertEquals(7, rota.getTask(ids.get(1)).priority());

    // All or nothing: the same key twice in one batch is a 422 naming the item; nothing made.
    int before = rota.listTasks(TaskQuery.builder().job(job).build()).items().size();
    RotaApiException dup = assertThrows(RotaApiException.class, () -> rota.createTasks(List.of(
        NewTask.builder(job).key("fresh").build(),
        NewTask.builder(job).key("dup").build(),
        NewTask.builder(job).key("dup").build())));
    assertEquals(422, dup.status());
    assertEquals(Optional.of("tasks[2].key"), dup.field());
    assertEquals(before, rota.listTasks(TaskQuery.builder().job(job).build()).items().size());
    assertEquals(List.of(), rota.listTasks(TaskQuery.builder().job(job).key("fresh").build()).items());

    assertEquals(List.of(), rota.createTasks(List.of()));

    // Higher priority first.
    List<PulledTask> pulled = Pulls.pullN(rota, job, 2);
    assertEquals(List.of(ids.get(1), ids.get(0)),
        pulled.stream().map(PulledTask::task).collect(Collectors.toList()));
    List<AckResult> acked = rota.ackBatch(job,
        pulled.stream().map(AckItem::of).collect(Collectors.toList()));
    assertTrue(acked.stream().allMatch(AckResult::acked), acked.toString());
    rota.cancelTask(existing.id());
  }

  @Test
  void deadTasksAreRedriven(RotaClient rota, RotaServer server) {
    String job = server.newPullJob();
    Task task = rota.createTask(NewTask.builder(job).maxAttempts(1).build());
    PulledTask item = Pulls.pullOne(rota, job);
    assertEquals(TaskStatus.DEAD, rota.nack(item.task(), item.lease(), "fatal").status());

    Task notDead = rota.createTask(NewTask.builder(job).delay(Duration.ofMinutes(1)).build());
    RotaApiException conflict = assertThrows(RotaApiException.class, () -> rota.retryTask(notDead.id()));
    assertEquals(409, conflict.status());
    assertFalse(conflict.isLeaseLost());
    rota.cancelTask(notDead.id());

    Task retried = rota.retryTask(task.id());
    assertEquals(task.id(), retried.id());
    assertNotEquals(TaskStatus.DEAD, retried.status());
    PulledTask again = Pulls.pullOne(rota, job);
    assertEquals(task.id(), again.task());
    assertEquals(2, again.attempt());
    assertEquals(TaskStatus.SUCCEEDED, rota.ack(again.task(), again.lease()).status());

    List<Long> ids = rota.createTasks(List.of(
        NewTask.builder(job).maxAttempts(1).build(), NewTask.builder(job).maxAttempts(1).build()));
    for (PulledTask p : Pulls.pullN(rota, job, 2)) {
      rota.nack(p.task(), p.lease(), null);
    }
    assertEquals(1, rota.retryDead(job, 1));
    assertEquals(1, rota.retryDead(job));
    assertEquals(0, rota.retryDead(job));
    List<PulledTask> redriven = Pulls.pullN(rota, job, 2);
    assertEquals(new HashSet<>(ids), redriven.stream().map(PulledTask::task).collect(Collectors.toSet()));
    assertEquals(Set.of(2), redriven.stream().map(PulledTask::attempt).collect(Collectors.toSet()));
    assertTrue(rota.ackBatch(job, redriven.stream().map(AckItem::of).collect(Collectors.toList()))
        .stream().allMatch(AckResult::acked));
  }
}
