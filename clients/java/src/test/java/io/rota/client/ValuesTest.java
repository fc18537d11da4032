package io.rota.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.OptionalLong;
import org.junit.jupiter.api.Test;

/** What is sent and read, without a server. */
class ValuesTest {

  private static JsonNode json(String text) throws Exception {
    return Json.MAPPER.readTree(text);
  }

  /** Equal as JSON once written (a tree built with longs holds LongNodes, a parsed one IntNodes). */
  private static void assertJson(JsonNode expected, JsonNode actual) throws Exception {
    assertEquals(expected, json(actual.toString()));
  }

  @Test
  void newTaskSendsOnlyWhatWasSet() throws Exception {
    assertJson(json("{\"job\":\"orders\"}"),
        NewTask.of("orders").toJson());
    NewTask full = NewTask.builder(7).payload("p").delay(Duration.ofSeconds(30)).key("k")
        .maxAttempts(3).priority(-5).backoff(Backoff.fixed(Duration.ofMillis(1500))).build();
    assertJson(json("{\"job\":7,\"payload\":\"p\",\"delay_ms\":30000,\"key\":\"k\","
        + "\"max_attempts\":3,\"priority\":-5,\"backoff\":{\"kind\":\"fixed\",\"delay_ms\":1500}}"),
        full.toJson());
    NewTask at = NewTask.builder("orders").runAt(Instant.parse("2026-11-30T03:29:00.123456Z")).build();
    assertEquals("2026-11-30T03:29:00.123Z", at.toJson().get("run_at").asText());
    assertEquals("2026-11-30T03:29:00.000Z", Json.formatTime(Instant.parse("2026-11-30T03:29:00Z")));
    assertEquals(full, NewTask.builder(7).payload("p").delayMs(30000).key("k").maxAttempts(3)
        .priority(-5).backoff(Backoff.fixed(Duration.ofMillis(1500))).build());
  }

  @Test
  void backoffs() throws Exception {
    assertJson(json("{\"kind\":\"exponential\",\"base_ms\":60000,\"factor\":2.0,\"max_ms\":3600000,"
        + "\"jitter\":true}"),
        Backoff.exponential(Duration.ofMinutes(1), 2, Duration.ofHours(1)).withJitter().toJson());
    assertThrows(IllegalStateException.class, () -> Backoff.fixed(Duration.ZERO).withJitter());
  }

  @Test
  void pullAndQueryOptions() throws Exception {
    assertJson(json("{}"),
        PullOptions.defaults().toJson());
    assertJson(json("{\"max\":5,\"lease_ms\":60000,\"wait_ms\":20000,\"consumer\":\"c\"}"),
        PullOptions.builder().max(5).lease(Duration.ofMinutes(1)).maxWait(Duration.ofSeconds(20))
            .consumer("c").build().toJson());
    assertEquals(Map.of("job", "7", "status", "dead", "limit", "3", "after", "99"),
        TaskQuery.builder().job(7).status(TaskStatus.DEAD).limit(3).after("99").build().params());
    assertThrows(IllegalArgumentException.class, () -> TaskQuery.builder().status(TaskStatus.UNKNOWN));
    ConsumeOptions c = ConsumeOptions.defaults();
    assertEquals(Duration.ofSeconds(10), c.extendInterval());
    assertJson(json("{\"max\":10,\"lease_ms\":30000,\"wait_ms\":20000}"),
        c.pullOptions().toJson());
    assertThrows(IllegalArgumentException.class, () -> ConsumeOptions.builder().extendFraction(1));
    assertThrows(IllegalArgumentException.class, () -> ConsumeOptions.builder().concurrency(0));
  }

  @Test
  void acks() throws Exception {
    assertJson(json("{\"task\":3,\"lease\":\"l\",\"output\":{\"a\":[1,2]}}"),
        AckItem.of(3, "l").withOutput(Map.of("a", List.of(1, 2))).toJson());
    assertJson(json("{\"task\":3,\"lease\":\"l\",\"output\":\"text\"}"),
        AckItem.of(3, "l").withOutput("text").toJson());
  }

  @Test
  void aTaskIsReadLeniently() throws Exception {
    Task t = Task.fromJson(json("{\"id\":9,\"job\":2,\"kind\":\"step\",\"status\":\"paused\","
        + "\"due_at\":\"2026-12-05T08:11:30.094Z\",\"attempts\":1,\"max_attempts\":null,\"key\":null,"
        + "\"priority\":0,\"payload\":\"x\",\"last_run_id\":4,\"created_at\":\"2026-12-05T08:11:30.094Z\","
        + "\"updated_at\":\"2026-12-05T08:11:30.095Z\",\"new_field\":true}"), true);
    assertEquals(TaskStatus.UNKNOWN, t.status());
    assertEquals("paused", t.statusName());
    assertEquals(Instant.parse("2026-12-05T08:11:30.094Z"), t.dueAt());
    assertEquals(OptionalInt.empty(), t.maxAttempts());
    assertEquals(OptionalLong.of(4), t.lastRunId());
    assertEquals(Optional.empty(), t.key());
    assertTrue(t.created());
    assertEquals(t, Task.fromJson(json(
        "{\"id\":9,\"job\":2,\"kind\":\"step\",\"status\":\"paused\",\"due_at\":\"2026-12-05T08:11:30.094Z\","
            + "\"attempts\":1,\"priority\":0,\"payload\":\"x\",\"last_run_id\":4,"
            + "\"created_at\":\"2026-12-05T08:11:30.094Z\",\"updated_at\":\"2026-12-05T08:11:30.095Z\"}"),
        true));
  }

  @Test
  void anInstanceIsImmutable() throws Exception {
    WorkflowInstance i = WorkflowInstance.fromJson(json("{\"id\":1,\"workflow\":2,\"version\":1,"
        + "\"status\":\"succeeded\",\"input\":{\"a\":1},\"output\":{\"s\":{\"b\":2}},\"key\":null,"
        + "\"created_at\":\"2026-12-05T08:11:45.952Z\",\"finished_at\":null,\"steps\":[{\"name\":\"s\","
        + "\"status\":\"succeeded\",\"task\":6,\"runs\":[11],\"output\":{\"b\":2},"
        + "\"items\":{\"total\":3,\"succeeded\":3,\"failed\":0,\"running\":0},\"message\":null}]}"), false);
    ((ObjectNode) i.output()).put("tampered", true);
    assertEquals(json("{\"s\":{\"b\":2}}"), i.output());
    assertFalse(i.isRunning());
    InstanceStep s = i.step("s").orElseThrow();
    assertEquals(List.of(11L), s.runs());
    assertEquals(3, s.items().orElseThrow().total());
    assertThrows(UnsupportedOperationException.class, () -> i.steps().clear());
  }

  @Test
  void theFieldAnErrorNames() {
    assertEquals(Optional.of("delay_ms"), error(422, "delay_ms: must not be negative (got -1)").field());
    assertEquals(Optional.of("tasks[1].priority"),
        error(422, "tasks[1].priority: must be between -1000 and 1000 (got 9999)").field());
    assertEquals(Optional.of("bogus"), error(400, "invalid JSON body: bogus: unknown field `bogus`, "
        + "expected one of `job` at line 1 column 19").field());
    assertEquals(Optional.of("limit"), error(400, "query parameter `limit` must be at least 1").field());
    assertEquals(Optional.of("id"), error(400, "path parameter `id` must be an integer id, not `abc`").field());
    assertEquals(Optional.empty(), error(404, "task 99999 not found").field());
    assertEquals(Optional.empty(), error(400, "malformed JSON body: EOF while parsing an object").field());
    RotaApiException lease = new RotaApiException("POST", "/api/v1/tasks/1/ack", 409, "gone", "", true);
    assertTrue(lease.isLeaseLost() && lease.isConflict());
    assertFalse(error(409, "x").isLeaseLost());
    assertEquals(Optional.empty(),
        new RotaApiException("GET", "/x", 502, "bad gateway", "<html>bad gateway</html>", false).errorBody());
    assertEquals("x", error(422, "y").errorBody().orElseThrow().get("error").asText());
  }

  private static RotaApiException error(int status, String text) {
    return new RotaApiException("GET", "/api/v1/x", status, text, "{\"error\":\"x\"}", false);
  }

  @Test
  void namesAreOnePathSegment() {
    assertEquals("close%20order%2Feu%2B1%C3%A9", RotaClient.segment("close order/eu+1é"));
  }

  @Test
  void aNackSaysWhatWasThrown() {
    assertEquals("IllegalStateException: b is not ready",
        ConsumeLoop.errorText(new IllegalStateException("b is not ready")));
    assertEquals("NullPointerException", ConsumeLoop.errorText(new NullPointerException()));
    assertEquals(4000, ConsumeLoop.errorText(new RuntimeException("x".repeat(5000))).length());
  }
}
