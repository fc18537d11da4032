package io.rota.client;

/**
 * No answer from the server: the connection failed, the request timed out, or the calling
 * thread was interrupted while it waited (its interrupt flag is then set again). Whether the
 * request took effect is unknown, so a create is safe to repeat only with a task {@code key}.
 */
public class RotaConnectionException extends RotaException {
  private static final long serialVersionUID = 1L;

  /**
   * A failure to get an answer.
   *
   * @param message which request, to which server, and why there was no answer
   * @param cause the I/O error, timeout or interruption
   */
  public RotaConnectionException(String message, Throwable cause) {
    super(message, cause);
  }
}
