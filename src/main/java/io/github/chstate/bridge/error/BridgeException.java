package io.github.chstate.bridge.error;

/** A failure the client is told about: a stable {@link ErrorCode} and a message saying what to do. */
public class BridgeException extends RuntimeException {
    private final ErrorCode code;

    public BridgeException(ErrorCode code, String message) {
        super(message);
        this.code = code;
    }

    public BridgeException(ErrorCode code, String message, Throwable cause) {
        super(message, cause);
        this.code = code;
    }

    public ErrorCode code() {
        return code;
    }
}
