package io.rota.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Optional;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The server answered with a status outside 2xx. {@link #status()} tells 400 (malformed
 * request) from 401/403 (token), 404 (no such task, job or workflow), 409 (conflict with the
 * current state, e.g. cancelling a running task, or a lease no longer held), 413 (too large),
 * 422 (an invalid value) and 5xx (the server or its database cannot take the request now;
 * nothing was changed, retry).
 *
 * <p>{@link #error()} is the API's {@code {"error": "..."}} text, in words a user can act on;
 * for a bad value it starts with the field's name ({@code "delay_ms: must not be negative
 * (got -1)"}, {@code "tasks[1].priority: must be between -1000 and 1000 (got 9999)"}), which
 * {@link #field()} extracts.
 */
public class RotaApiException extends RotaException {
  private static final long serialVersionUID = 1L;

  /** {@code name}, {@code tasks[1].key}, {@code steps[0].after} … followed by {@code ": "}. */
  private static final Pattern FIELD_PREFIX =
      Pattern.compile("^([A-Za-z_][A-Za-z0-9_]*(?:\\[\\d+\\])?(?:\\.[A-Za-z_][A-Za-z0-9_]*(?:\\[\\d+\\])?)*): ");

  /** {@code query parameter `limit` …}, {@code path parameter `id` …}. */
  private static final Pattern PARAMETER = Pattern.compile("^(?:query|path) parameter `([^`]+)`");

  private static final String JSON_BODY = "invalid JSON body: ";

  /** The HTTP status. */
  private final int status;
  /** The API's {@code error} text. */
  private final String error;
  /** The answer's body as received. */
  private final String body;
  /** The request's method. */
  private final String method;
  /** The request's path. */
  private final String path;
  /** Whether the request was an ack, nack or extend. */
  private final boolean leaseOperation;

  /**
   * An answer outside 2xx.
   *
   * @param method the request's method ({@code POST})
   * @param path the request's path ({@code /api/v1/tasks})
   * @param status the HTTP status
   * @param error the API's {@code error} text (or the body's text if it had none)
   * @param body the answer's body as received (may be empty)
   * @param leaseOperation whether the request was an ack, nack or extend, whose 409 means the
   *     lease is no longer held
   */
  public RotaApiException(
      String method, String path, int status, String error, String body, boolean leaseOperation) {
    super(method + " " + path + ": " + status + ": " + error, null);
    this.status = status;
    this.error = error;
    this.body = body == null ? "" : body;
    this.method = method;
    this.path = path;
    this.leaseOperation = leaseOperation;
  }

  /**
   * The HTTP status.
   *
   * @return e.g. 404, 409, 422
   */
  public int status() {
    return status;
  }

  /**
   * The API's error message: the {@code error} field of its JSON body (or the body's first
   * 500 characters, or the status's reason, when the answer was not Rota's JSON, e.g. a
   * proxy's).
   *
   * @return the message, never {@code null}
   */
  public String error() {
    return error;
  }

  /**
   * The answer's body as received, e.g. {@code {"error":"task 7 not found"}}.
   *
   * @return the body, empty if there was none
   */
  public String body() {
    return body;
  }

  /**
   * The answer's body as JSON, if it was JSON ({@code {"error": "..."}} for Rota's errors).
   *
   * @return the parsed body, or empty
   */
  public Optional<JsonNode> errorBody() {
    try {
      JsonNode node = Json.MAPPER.readTree(body);
      return node == null || node.isMissingNode() ? Optional.empty() : Optional.of(node);
    } catch (java.io.IOException | RuntimeException e) {
      return Optional.empty();
    }
  }

  /**
   * The request's method.
   *
   * @return e.g. {@code POST}
   */
  public String method() {
    return method;
  }

  /**
   * The request's path (without the query string).
   *
   * @return e.g. {@code /api/v1/tasks/7/ack}
   */
  public String path() {
    return path;
  }

  /**
   * The field or parameter the message names, when it names one: the API starts the message
   * of an invalid value with the field's path ({@code delay_ms}, {@code tasks[1].key}); a bad
   * query or path parameter and an unknown or mistyped JSON field are named too.
   *
   * @return e.g. {@code delay_ms}, {@code tasks[1].priority}, {@code limit}; empty if the
   *     message names none (e.g. {@code task 7 not found})
   */
  public Optional<String> field() {
    String text = error.startsWith(JSON_BODY) ? error.substring(JSON_BODY.length()) : error;
    Matcher prefix = FIELD_PREFIX.matcher(text);
    if (prefix.find()) {
      return Optional.of(prefix.group(1));
    }
    Matcher parameter = PARAMETER.matcher(text);
    if (parameter.find()) {
      return Optional.of(parameter.group(1));
    }
    return Optional.empty();
  }

  /**
   * Is this a 4xx: the request itself is wrong, and repeating it unchanged will fail again?
   *
   * @return true for 400 to 499
   */
  public boolean isClientError() {
    return status >= 400 && status < 500;
  }

  /**
   * Is this a 5xx: the server (or its database) could not take the request now? Rota changes
   * nothing on a 503 or 507, so the request may be repeated.
   *
   * @return true for 500 to 599
   */
  public boolean isServerError() {
    return status >= 500 && status < 600;
  }

  /**
   * Is this a 404: no such task, job, workflow, instance or route?
   *
   * @return true for 404
   */
  public boolean isNotFound() {
    return status == 404;
  }

  /**
   * Is this a 409: the request conflicts with the current state (cancelling a running task,
   * retrying a task that is not dead, a lease no longer held)?
   *
   * @return true for 409
   */
  public boolean isConflict() {
    return status == 409;
  }

  /**
   * Is this the 409 of an ack, nack or extend whose lease is not the task's current one (it
   * expired and the task was handed out again, or the attempt already ended)? Nothing was
   * changed; the task will be (or was) delivered again.
   *
   * @return true for a 409 of a lease operation
   */
  public boolean isLeaseLost() {
    return status == 409 && leaseOperation;
  }
}
