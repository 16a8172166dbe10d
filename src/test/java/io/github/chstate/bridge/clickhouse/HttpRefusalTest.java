package io.github.chstate.bridge.clickhouse;

import com.clickhouse.client.api.ClientException;
import com.clickhouse.client.api.ServerException;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** HTTP answers without a ClickHouse error, as the driver reports them: what each means, and whether it is retried. */
class HttpRefusalTest {
    @ParameterizedTest
    @CsvSource({
            "413, false, client_max_body_size",
            "400, false, http_max_uri_size",
            "414, false, URL was longer",
            "431, false, headers",
            "404, false, check the host, port",
            "429, true, too many requests",
            "502, true, could not get an answer",
            "504, true, could not get an answer",
            "500, true, without a ClickHouse error"})
    void aStatusTheDriverHasNoExceptionForIsNamedAndRetriedOnlyIfItMayPass(int status, boolean passing, String says) {
        for (Exception e : new Exception[] {
                new ClientException("Unexpected result status " + status),
                new RuntimeException("wrapped", new ServerException(ServerException.CODE_UNKNOWN, "<html>proxy</html>",
                        status, "query-id"))}) {
            ServerErrors.HttpRefusal refusal = ServerErrors.httpRefusal(e);
            assertEquals(status, refusal.status());
            assertEquals(passing, refusal.passing());
            assertTrue(refusal.meaning().contains(says), refusal.meaning());
            String reason = Retry.transientReason(e);
            if (passing) {
                assertEquals("HTTP " + status + ": " + refusal.meaning(), reason);
            } else {
                assertNull(reason);
            }
        }
    }

    @Test
    void theDriversWordingOfA502IsRead() {
        ServerErrors.HttpRefusal refusal = ServerErrors.httpRefusal(
                new ClientException("Server returned '502 Bad gateway'. Check network and proxy settings."));
        assertEquals(502, refusal.status());
        assertTrue(refusal.passing());
    }

    @Test
    void anAnswerWithAClickHouseErrorIsNotAnHttpRefusal() {
        assertNull(ServerErrors.httpRefusal(new ServerException(60, "Code: 60. Unknown table", 404, "q")));
        assertNull(ServerErrors.httpRefusal(new ClientException("Read timed out")));
    }
}
