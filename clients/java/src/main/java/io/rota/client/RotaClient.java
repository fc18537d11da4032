package io.rota.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;

/**
 * A client of one Rota server (any scheduler node serves every call), over the JDK's
 * {@link HttpClient}. Build one with {@link #builder(String)}:
 *
 * <pre>{@code
 * RotaClient rota = RotaClient.builder("http://127.0.0.1:8080").token(System.getenv("ROTA_API_TOKEN")).build();
 * Task task = rota.createTask(NewTask.builder("close-order").delay(Duration.ofMinutes(30))
 *     .key("order-42").payload("{\"order_id\":42}").build());
 * }</pre>
 *
 * <p>Every answer outside 2xx throws a {@link RotaApiException} with the HTTP status and the
 * API's error text; no answer throws a {@link RotaConnectionException}. A client is immutable
 * and thread-safe: share one.
 */
public final class RotaClient {
  /** The client's version, sent in its {@code User-Agent}. */
  public static final String VERSION = "0.1.0";

  private static final String API = "/api/v1";

  private final String baseUrl;
  private final String authorization;
  private final Duration requestTimeout;
  private final HttpClient http;

  private RotaClient(Builder b) {
    this.baseUrl = b.baseUrl;
    this.authorization = b.token == null ? null : "Bearer " + b.token;
    this.requestTimeout = b.requestTimeout;
    this.http = b.httpClient != null
        ? b.httpClient
        : HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(b.connectTimeout)
            .followRedirects(HttpClient.Redirect.NEVER)
            .build();
  }

  /**
   * A builder of a client of the server at {@code baseUrl}.
   *
   * @param baseUrl the server's base URL, e.g. {@code http://127.0.0.1:8080} (a path prefix is
   *     kept: {@code https://ops.example.com/rota})
   * @return a builder
   * @throws IllegalArgumentException if it is not an http:// or https:// URL
   */
  public static Builder builder(String baseUrl) {
    return new Builder(baseUrl);
  }

  /**
   * The server's base URL, without a trailing slash.
   *
   * @return e.g. {@code http://127.0.0.1:8080}
   */
  public String baseUrl() {
    return baseUrl;
  }

  @Override
  public String toString() {
    return "RotaClient{" + baseUrl + "}";
  }

  // -- tasks -------------------------------------------------------------------------------

  /**
   * Creates a task. With a {@code key} the job already has, the existing task is returned
   * (the server's 200) and its {@link Task#created()} is false; a new task (201) has it true.
   *
   * @param task what to create
   * @return the task
   * @throws RotaApiException 404 for an unknown job, 422 for an invalid value (the message and
   *     {@link RotaApiException#field()} name the field), 413 for a payload too large
   * @throws RotaConnectionException if the server did not answer
   */
  public Task createTask(NewTask task) {
    Objects.requireNonNull(task, "task");
    Answer a = call("POST", API + "/tasks", null, task.toJson(), false, Duration.ZERO);
    return a.decode(json -> Task.fromJson(json, a.status == 201));
  }

  /**
   * Creates up to 10,000 tasks at once, all or nothing: an invalid item fails the whole batch
   * (its index named in the message, e.g. {@code tasks[3].priority}) and creates none.
   *
   * @param tasks what to create, in order
   * @return the tasks' ids in the order given (for an item whose {@code key} exists, the
   *     existing task's id)
   * @throws RotaApiException 404 for an item's unknown job, 422 for an invalid item (or the
   *     same key twice), 413 for too many tasks or a payload too large
   * @throws RotaConnectionException if the server did not answer
   */
  public List<Long> createTasks(Collection<NewTask> tasks) {
    ObjectNode body = Json.object();
    ArrayNode items = body.putArray("tasks");
    for (NewTask t : tasks) {
      items.add(Objects.requireNonNull(t, "a task of the batch").toJson());
    }
    Answer a = call("POST", API + "/tasks/batch", null, body, false, Duration.ZERO);
    return a.decode(json -> Json.longs(Json.required(json, "ids")));
  }

  /**
   * The task {@code id}.
   *
   * @param id the task's id
   * @return the task
   * @throws RotaApiException 404 if there is none
   * @throws RotaConnectionException if the server did not answer
   */
  public Task getTask(long id) {
    return call("GET", API + "/tasks/" + id, null, null, false, Duration.ZERO)
        .decode(json -> Task.fromJson(json, false));
  }

  /**
   * Cancels a task that has not started (even one already in a node's wheel: it never
   * starts). Cancelling a cancelled task answers it again.
   *
   * @param id the task's id
   * @return the task, {@code cancelled}
   * @throws RotaApiException 409 if it is running or finished, 404 if there is none
   * @throws RotaConnectionException if the server did not answer
   */
  public Task cancelTask(long id) {
    return call("DELETE", API + "/tasks/" + id, null, null, false, Duration.ZERO)
        .decode(json -> Task.fromJson(json, false));
  }

  /**
   * Cancels the task of {@code job} created with {@code key}, as {@link #cancelTask(long)}.
   *
   * @param job the job's name or id
   * @param key the key the task was created with
   * @return the task, {@code cancelled}
   * @throws RotaApiException 404 if the job has no task with this key, 409 if it is running or
   *     finished
   * @throws RotaConnectionException if the server did not answer
   */
  public Task cancelTask(String job, String key) {
    Map<String, String> query = new LinkedHashMap<>();
    query.put("job", Objects.requireNonNull(job, "job"));
    query.put("key", Objects.requireNonNull(key, "key"));
    return call("DELETE", API + "/tasks", query, null, false, Duration.ZERO)
        .decode(json -> Task.fromJson(json, false));
  }

  /**
   * A page of tasks, newest first. For the next page, ask again with {@link
   * TaskQuery.Builder#after} set to this page's {@link Page#next()}.
   *
   * @param query the filters ({@link TaskQuery#all()} for none)
   * @return the page
   * @throws RotaApiException 400 for a malformed filter, 404 for an unknown job
   * @throws RotaConnectionException if the server did not answer
   */
  public Page<Task> listTasks(TaskQuery query) {
    return call("GET", API + "/tasks", query.params(), null, false, Duration.ZERO)
        .decode(json -> {
          List<Task> items = new ArrayList<>();
          Json.required(json, "items").forEach(t -> items.add(Task.fromJson(t, false)));
          return new Page<>(items, Json.optionalText(json, "next").orElse(null));
        });
  }

  /**
   * Re-drives a {@code dead} task: a new attempt, due now.
   *
   * @param id the task's id
   * @return the task, due again (the API shows it {@code failed}, as every task whose retry
   *     is due)
   * @throws RotaApiException 409 if it is not dead, 404 if there is none
   * @throws RotaConnectionException if the server did not answer
   */
  public Task retryTask(long id) {
    return call("POST", API + "/tasks/" + id + "/retry", null, null, false, Duration.ZERO)
        .decode(json -> Task.fromJson(json, false));
  }

  /**
   * Re-drives up to 1,000 of {@code job}'s dead tasks, oldest due first.
   *
   * @param job the job's name or id
   * @return how many are due again
   * @throws RotaApiException 404 for an unknown job
   * @throws RotaConnectionException if the server did not answer
   */
  public long retryDead(String job) {
    return retryDead(job, null);
  }

  /**
   * Re-drives up to {@code limit} of {@code job}'s dead tasks, oldest due first.
   *
   * @param job the job's name or id
   * @param limit 1 to 10,000, or {@code null} for the server's default (1,000)
   * @return how many are due again
   * @throws RotaApiException 404 for an unknown job, 422 for a limit out of range
   * @throws RotaConnectionException if the server did not answer
   */
  public long retryDead(String job, Integer limit) {
    ObjectNode body = Json.object().put("job", job).put("status", "dead");
    if (limit != null) {
      body.put("limit", limit);
    }
    return call("POST", API + "/tasks/retry", null, body, false, Duration.ZERO)
        .decode(json -> Json.requiredLong(json, "retried"));
  }

  // -- workflows ---------------------------------------------------------------------------

  /**
   * Starts an instance of {@code workflow}: its first steps' tasks are created at once.
   *
   * @param workflow the workflow's name or id
   * @param input any JSON value every step's payload carries as {@code input} (a Jackson
   *     {@code JsonNode}, a map, a list, a string, a number, a POJO), or {@code null}
   * @return the instance ({@link WorkflowInstance#created()} true)
   * @throws RotaApiException 404 for an unknown workflow, 409 if it is disabled
   * @throws RotaConnectionException if the server did not answer
   */
  public WorkflowInstance startWorkflow(String workflow, Object input) {
    return startWorkflow(workflow, input, null);
  }

  /**
   * Starts an instance of {@code workflow} once per {@code key}: with a key already used, the
   * existing instance is returned (the server's 200) and its {@link WorkflowInstance#created()}
   * is false.
   *
   * @param workflow the workflow's name or id
   * @param input any JSON value (see {@link #startWorkflow(String, Object)}), or {@code null}
   * @param key an idempotency key, or {@code null} for none
   * @return the instance
   * @throws RotaApiException 404 for an unknown workflow, 409 if it is disabled, 422 for an
   *     invalid key
   * @throws RotaConnectionException if the server did not answer
   */
  public WorkflowInstance startWorkflow(String workflow, Object input, String key) {
    ObjectNode body = Json.object();
    body.set("input", Json.toTree(input));
    if (key != null) {
      body.put("key", key);
    }
    Answer a = call("POST", API + "/workflows/" + segment(workflow) + "/instances", null, body,
        false, Duration.ZERO);
    return a.decode(json -> WorkflowInstance.fromJson(json, a.status == 201));
  }

  /**
   * The workflow instance {@code id}, with its steps.
   *
   * @param id the instance's id
   * @return the instance
   * @throws RotaApiException 404 if there is none
   * @throws RotaConnectionException if the server did not answer
   */
  public WorkflowInstance getInstance(long id) {
    return call("GET", API + "/workflow-instances/" + id, null, null, false, Duration.ZERO)
        .decode(json -> WorkflowInstance.fromJson(json, false));
  }

  /**
   * Waits until the instance {@code id} has ended, reading it every 250 ms; its
   * {@link WorkflowInstance#output()} is then final.
   *
   * @param id the instance's id
   * @param timeout the longest wait
   * @return the instance, {@code succeeded}, {@code failed} or {@code cancelled}
   * @throws TimeoutException if it still runs after {@code timeout}
   * @throws InterruptedException if the calling thread is interrupted
   * @throws RotaApiException 404 if there is no such instance
   * @throws RotaConnectionException if the server did not answer
   */
  public WorkflowInstance waitForInstance(long id, Duration timeout)
      throws TimeoutException, InterruptedException {
    return waitForInstance(id, timeout, Duration.ofMillis(250));
  }

  /**
   * Waits until the instance {@code id} has ended, reading it every {@code poll}.
   *
   * @param id the instance's id
   * @param timeout the longest wait
   * @param poll the time between two reads
   * @return the instance, {@code succeeded}, {@code failed} or {@code cancelled}
   * @throws TimeoutException if it still runs after {@code timeout}
   * @throws InterruptedException if the calling thread is interrupted
   * @throws RotaApiException 404 if there is no such instance
   * @throws RotaConnectionException if the server did not answer
   */
  public WorkflowInstance waitForInstance(long id, Duration timeout, Duration poll)
      throws TimeoutException, InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      WorkflowInstance instance = getInstance(id);
      if (!instance.isRunning()) {
        return instance;
      }
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        throw new TimeoutException("workflow instance " + id + " still runs after " + timeout);
      }
      Thread.sleep(Math.max(1, Math.min(poll.toMillis(), left / 1_000_000)));
    }
  }

  // -- pull delivery -----------------------------------------------------------------------

  /**
   * Takes due tasks of the pull job {@code job}, higher priority first, then earlier due, each
   * with a lease. With {@link PullOptions.Builder#maxWait} it waits that long for one to fall
   * due when none is ready.
   *
   * @param job the job's name or id
   * @param options how many, how long a lease, how long to wait, who pulls
   * @return the leased tasks; empty if none fell due in time
   * @throws RotaApiException 404 for an unknown job, 409 for a job not delivered by pull, 422
   *     for an option out of range (the message names it)
   * @throws RotaConnectionException if the server did not answer
   */
  public List<PulledTask> pull(String job, PullOptions options) {
    Duration wait = Duration.ofMillis(options.waitMillis());
    return call("POST", API + "/jobs/" + segment(job) + "/pull", null, options.toJson(), false, wait)
        .decode(json -> {
          List<PulledTask> items = new ArrayList<>();
          Json.required(json, "items").forEach(t -> items.add(PulledTask.fromJson(t)));
          return Collections.unmodifiableList(items);
        });
  }

  /**
   * The attempt succeeded: the task is {@code succeeded}.
   *
   * @param task the task's id
   * @param lease the lease its pull gave
   * @return the task
   * @throws RotaApiException 409 ({@link RotaApiException#isLeaseLost()}) if the lease is not
   *     the task's current one (nothing changed), 404 if there is no such task
   * @throws RotaConnectionException if the server did not answer
   */
  public Task ack(long task, String lease) {
    return ack(task, lease, null);
  }

  /**
   * The attempt succeeded with an output: the task is {@code succeeded}, and for a workflow
   * step the output is given to the steps after it.
   *
   * @param task the task's id
   * @param lease the lease its pull gave
   * @param output any JSON value (a Jackson {@code JsonNode}, a map, a list, a string, a
   *     number, a POJO; at most 64 KiB), or {@code null} for none
   * @return the task
   * @throws RotaApiException 409 ({@link RotaApiException#isLeaseLost()}) if the lease is not
   *     the task's current one (nothing changed), 404 if there is no such task
   * @throws RotaConnectionException if the server did not answer
   */
  public Task ack(long task, String lease, Object output) {
    ObjectNode body = Json.object().put("lease", Objects.requireNonNull(lease, "lease"));
    if (output != null) {
      body.set("output", Json.toTree(output));
    }
    return call("POST", API + "/tasks/" + task + "/ack", null, body, true, Duration.ZERO)
        .decode(json -> Task.fromJson(json, false));
  }

  /**
   * The attempt failed: the task is retried after its backoff while attempts remain, else it
   * is {@code dead}.
   *
   * @param task the task's id
   * @param lease the lease its pull gave
   * @param error why (kept as the run's message), or {@code null}
   * @return the task: {@code failed} (a retry is due at {@link Task#dueAt()}) or {@code dead}
   * @throws RotaApiException 409 ({@link RotaApiException#isLeaseLost()}) if the lease is not
   *     the task's current one (nothing changed), 404 if there is no such task
   * @throws RotaConnectionException if the server did not answer
   */
  public Task nack(long task, String lease, String error) {
    return nack(task, lease, error, null);
  }

  /**
   * The attempt failed: the task is retried after {@code retryAfter} (instead of its backoff)
   * while attempts remain, else it is {@code dead}.
   *
   * @param task the task's id
   * @param lease the lease its pull gave
   * @param error why (kept as the run's message), or {@code null}
   * @param retryAfter the delay before the retry (up to 7 days), or {@code null} for the
   *     backoff
   * @return the task: {@code failed} (a retry is due at {@link Task#dueAt()}) or {@code dead}
   * @throws RotaApiException 409 ({@link RotaApiException#isLeaseLost()}) if the lease is not
   *     the task's current one (nothing changed), 404 if there is no such task, 422 for a delay
   *     out of range
   * @throws RotaConnectionException if the server did not answer
   */
  public Task nack(long task, String lease, String error, Duration retryAfter) {
    ObjectNode body = Json.object().put("lease", Objects.requireNonNull(lease, "lease"));
    if (error != null) {
      body.put("error", error);
    }
    if (retryAfter != null) {
      body.put("delay_ms", retryAfter.toMillis());
    }
    return call("POST", API + "/tasks/" + task + "/nack", null, body, true, Duration.ZERO)
        .decode(json -> Task.fromJson(json, false));
  }

  /**
   * The lease now ends {@code lease} from now.
   *
   * @param task the task's id
   * @param lease the lease its pull gave
   * @param duration how long from now (1 s to 12 h)
   * @return the lease's new end
   * @throws RotaApiException 409 ({@link RotaApiException#isLeaseLost()}) if the lease is not
   *     the task's current one, 404 if there is no such task, 422 for a duration out of range
   * @throws RotaConnectionException if the server did not answer
   */
  public Instant extend(long task, String lease, Duration duration) {
    ObjectNode body = Json.object()
        .put("lease", Objects.requireNonNull(lease, "lease"))
        .put("lease_ms", duration.toMillis());
    return call("POST", API + "/tasks/" + task + "/extend", null, body, true, Duration.ZERO)
        .decode(json -> Json.requiredTime(json, "lease_expires_at"));
  }

  /**
   * Acks up to 1,000 leases of {@code job}'s tasks at once. A stale or unknown one does not
   * fail the others: each has its own {@link AckResult}.
   *
   * @param job the job's name or id
   * @param acks the leases (and outputs) to ack: {@link AckItem#of(PulledTask)}
   * @return one result per item, in order
   * @throws RotaApiException 404 for an unknown job, 413 for more than 1,000 items
   * @throws RotaConnectionException if the server did not answer
   */
  public List<AckResult> ackBatch(String job, Collection<AckItem> acks) {
    ObjectNode body = Json.object();
    ArrayNode items = body.putArray("acks");
    acks.forEach(a -> items.add(a.toJson()));
    return call("POST", API + "/jobs/" + segment(job) + "/ack", null, body, false, Duration.ZERO)
        .decode(json -> {
          List<AckResult> results = new ArrayList<>();
          Json.required(json, "results").forEach(r -> results.add(AckResult.fromJson(r)));
          return Collections.unmodifiableList(results);
        });
  }

  /**
   * Consumes the pull job {@code job} on a thread of its own until stopped: long-polls for a
   * batch, runs {@code handler} on each task on worker threads ({@link
   * ConsumeOptions#concurrency()}), extends the leases of the batch's unfinished tasks every
   * {@link ConsumeOptions#extendFraction()} of the lease, acks each task whose handler returned
   * and nacks each whose handler threw (with {@code "<ExceptionClass>: <message>"} as the
   * run's message), then pulls again.
   *
   * <p>A pull that gets no answer or a 5xx is tried again after a pause (0.5 s, doubling up
   * to 10 s); any other error of a pull (a 401, an unknown job, an invalid option) ends the
   * consumer ({@link ConsumerHandle#failure()}). An ack or nack that gets no answer is tried
   * again a few times; one refused (the lease was lost) is logged to the {@code
   * io.rota.client} {@link System.Logger}, as the task will be delivered again.
   *
   * @param job the job's name or id
   * @param handler what to do with each task
   * @param options batch size, lease, long poll, consumer name, concurrency
   * @return the running consumer: {@link ConsumerHandle#close()} stops it
   */
  public ConsumerHandle consume(String job, TaskHandler handler, ConsumeOptions options) {
    Objects.requireNonNull(handler, "handler");
    return consumeWithOutput(job, task -> {
      handler.handle(task);
      return null;
    }, options);
  }

  /**
   * As {@link #consume}, with a handler whose return value is sent as the ack's output (a
   * workflow step's output, given to the steps after it).
   *
   * @param job the job's name or id
   * @param handler what to do with each task, and its output
   * @param options batch size, lease, long poll, consumer name, concurrency
   * @return the running consumer: {@link ConsumerHandle#close()} stops it
   */
  public ConsumerHandle consumeWithOutput(String job, OutputHandler handler, ConsumeOptions options) {
    Objects.requireNonNull(job, "job");
    Objects.requireNonNull(handler, "handler");
    Objects.requireNonNull(options, "options");
    ConsumeLoop loop = new ConsumeLoop(this, job, handler, options);
    Thread thread = new Thread(loop, "rota-consumer-" + job);
    thread.setDaemon(false);
    thread.start();
    return new ConsumerHandle(loop, thread);
  }

  // -- anything else -----------------------------------------------------------------------

  /**
   * Any other call of the REST API (jobs, runs, workflows, …; see the server's OpenAPI
   * document at {@code /api/v1/openapi.json}).
   *
   * @param method e.g. {@code POST}
   * @param path e.g. {@code /api/v1/jobs}; a query string may be included, already encoded
   * @param body a JSON body (a Jackson {@code JsonNode}, a map, a POJO…), or {@code null} for
   *     none
   * @return the decoded answer (JSON {@code null} for an empty one, e.g. a 204)
   * @throws RotaApiException for an answer outside 2xx
   * @throws RotaConnectionException if the server did not answer
   */
  public JsonNode request(String method, String path, Object body) {
    Answer a = call(method, path, null, body == null ? null : Json.toTree(body), false,
        Duration.ZERO);
    return a.decode(Function.identity());
  }

  // -- transport ---------------------------------------------------------------------------

  /** A path segment: a name such as {@code close order/eu} as one segment. */
  static String segment(String nameOrId) {
    return URLEncoder.encode(Objects.requireNonNull(nameOrId, "name"), StandardCharsets.UTF_8)
        .replace("+", "%20");
  }

  private static String queryString(Map<String, String> query) {
    StringBuilder q = new StringBuilder();
    for (Map.Entry<String, String> e : query.entrySet()) {
      q.append(q.length() == 0 ? '?' : '&')
          .append(segment(e.getKey()))
          .append('=')
          .append(segment(e.getValue()));
    }
    return q.toString();
  }

  /** A 2xx answer: its status and body. */
  private static final class Answer {
    final String method;
    final String path;
    final int status;
    final String body;

    Answer(String method, String path, int status, String body) {
      this.method = method;
      this.path = path;
      this.status = status;
      this.body = body;
    }

    <T> T decode(Function<JsonNode, T> read) {
      JsonNode json;
      try {
        json = body.isBlank() ? NullNode.getInstance() : Json.MAPPER.readTree(body);
      } catch (IOException e) {
        throw new RotaException(method + " " + path + ": the answer (" + status + ") is not JSON: "
            + abbreviate(body), e);
      }
      try {
        return read.apply(json);
      } catch (RuntimeException e) {
        throw new RotaException(method + " " + path + ": unexpected answer (" + status + "): "
            + e.getMessage(), e);
      }
    }
  }

  private Answer call(
      String method, String path, Map<String, String> query, JsonNode body, boolean leaseOperation,
      Duration serverWait) {
    String url = baseUrl + path + (query == null || query.isEmpty() ? "" : queryString(query));
    HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(url))
        .timeout(requestTimeout.plus(serverWait))
        .header("Accept", "application/json")
        .header("User-Agent", "rota-client-java/" + VERSION);
    if (authorization != null) {
      request.header("Authorization", authorization);
    }
    if (body != null) {
      request.header("Content-Type", "application/json")
          .method(method, HttpRequest.BodyPublishers.ofString(Json.write(body), StandardCharsets.UTF_8));
    } else {
      request.method(method, HttpRequest.BodyPublishers.noBody());
    }
    HttpResponse<String> response;
    try {
      response = http.send(request.build(), HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
    } catch (HttpTimeoutException e) {
      throw new RotaConnectionException(method + " " + path + ": no answer from " + baseUrl
          + " in time (" + e.getMessage() + ")", e);
    } catch (IOException e) {
      throw new RotaConnectionException(method + " " + path + ": cannot reach " + baseUrl + " ("
          + e + ")", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RotaConnectionException(method + " " + path + ": interrupted while waiting for "
          + baseUrl, e);
    }
    int status = response.statusCode();
    String text = response.body() == null ? "" : response.body();
    if (status >= 200 && status < 300) {
      return new Answer(method, path, status, text);
    }
    throw new RotaApiException(method, path, status, errorText(status, text), text, leaseOperation);
  }

  /** The {@code error} of Rota's JSON error body; else the start of whatever came. */
  private static String errorText(int status, String body) {
    try {
      JsonNode json = Json.MAPPER.readTree(body);
      if (json != null && json.path("error").isTextual()) {
        return json.get("error").asText();
      }
    } catch (IOException | RuntimeException e) {
      // not JSON: a proxy's page, an empty body
    }
    String trimmed = body.strip();
    return trimmed.isEmpty() ? "HTTP " + status : abbreviate(trimmed);
  }

  private static String abbreviate(String text) {
    return text.length() <= 500 ? text : text.substring(0, 500) + "…";
  }

  /** Builds a {@link RotaClient}. Not thread-safe. */
  public static final class Builder {
    private final String baseUrl;
    private String token;
    private Duration connectTimeout = Duration.ofSeconds(10);
    private Duration requestTimeout = Duration.ofSeconds(10);
    private HttpClient httpClient;

    private Builder(String baseUrl) {
      Objects.requireNonNull(baseUrl, "baseUrl");
      URI uri;
      try {
        uri = URI.create(baseUrl.strip());
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("`" + baseUrl + "` is not a URL: " + e.getMessage(), e);
      }
      String scheme = uri.getScheme();
      if (!("http".equalsIgnoreCase(scheme) || "https".equalsIgnoreCase(scheme))
          || uri.getHost() == null || uri.getQuery() != null || uri.getFragment() != null) {
        throw new IllegalArgumentException("`" + baseUrl + "` is not an http:// or https:// base URL");
      }
      String text = uri.toString();
      while (text.endsWith("/")) {
        text = text.substring(0, text.length() - 1);
      }
      this.baseUrl = text;
    }

    /**
     * The API token, sent as {@code Authorization: Bearer <token>} (the server's {@code
     * ROTA_API_TOKEN}, or a token issued in the console).
     *
     * @param token the token, or {@code null} for none (every API call is then a 401)
     * @return this builder
     */
    public Builder token(String token) {
      this.token = token;
      return this;
    }

    /**
     * How long to wait for a connection (10 s by default). Ignored with {@link #httpClient},
     * whose own setting applies.
     *
     * @param timeout the connect timeout
     * @return this builder
     */
    public Builder connectTimeout(Duration timeout) {
      this.connectTimeout = Objects.requireNonNull(timeout, "timeout");
      return this;
    }

    /**
     * How long to wait for an answer (10 s by default); a long-polling pull waits its {@code
     * maxWait} on top.
     *
     * @param timeout the request timeout
     * @return this builder
     */
    public Builder requestTimeout(Duration timeout) {
      this.requestTimeout = Objects.requireNonNull(timeout, "timeout");
      return this;
    }

    /**
     * The {@link HttpClient} to send with (to share one, or set a proxy, TLS or an executor).
     * By default the client makes its own: HTTP/1.1, no redirects, {@link #connectTimeout}.
     *
     * @param httpClient the HTTP client
     * @return this builder
     */
    public Builder httpClient(HttpClient httpClient) {
      this.httpClient = Objects.requireNonNull(httpClient, "httpClient");
      return this;
    }

    /**
     * The client.
     *
     * @return an immutable, thread-safe {@link RotaClient}
     */
    public RotaClient build() {
      return new RotaClient(this);
    }
  }
}
