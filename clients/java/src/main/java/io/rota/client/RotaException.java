package io.rota.client;

/**
 * Anything that went wrong talking to Rota: the server refused the request
 * ({@link RotaApiException}, with its HTTP status and message) or did not answer
 * ({@link RotaConnectionException}). Unchecked, like the JDK's {@code UncheckedIOException}.
 */
public class RotaException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /**
   * An error with a message and an optional cause.
   *
   * @param message what went wrong
   * @param cause what caused it, or {@code null}
   */
  public RotaException(String message, Throwable cause) {
    super(message, cause);
  }
}
