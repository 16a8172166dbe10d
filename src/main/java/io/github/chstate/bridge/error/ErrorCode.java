package io.github.chstate.bridge.error;

/** The error codes of the protocol. Their numbers are part of the protocol: never renumber one. */
public enum ErrorCode {
    PARSE_ERROR(-32700),
    INVALID_REQUEST(-32600),
    METHOD_NOT_FOUND(-32601),
    INVALID_PARAMS(-32602),
    INTERNAL(-32603),
    CONFIGURATION(-32001),
    UNREACHABLE(-32002),
    AUTHENTICATION(-32003),
    LOCK_NOT_ACQUIRED(-32004),
    NOT_INITIALIZED(-32005),
    CLICKHOUSE(-32006),
    MISSING_SETTING(-32007),
    RUN_IN_PROGRESS(-32008),
    LOCK_LOST(-32009);

    private final int number;

    ErrorCode(int number) {
        this.number = number;
    }

    public int number() {
        return number;
    }
}
