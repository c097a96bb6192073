package dev.inpath.spark;

/** A failure of the connector, its message naming the server and the table where they apply. */
public final class InpathException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  InpathException(String message, Throwable cause) {
    super(message, cause);
  }
}
