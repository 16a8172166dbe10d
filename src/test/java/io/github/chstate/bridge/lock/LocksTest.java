package io.github.chstate.bridge.lock;

import io.github.chstate.bridge.config.Settings.LockKind;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The one lock decision, which initialize and check both follow: every setting, with and without KeeperMap. */
class LocksTest {
    @ParameterizedTest
    @CsvSource({
            "AUTO,   true,  false, KEEPER",
            "AUTO,   true,  true,  KEEPER",
            "AUTO,   false, false, CLAIMS",
            "AUTO,   false, true,  REPLICATED_WITHOUT_KEEPER_MAP",
            "KEEPER, true,  true,  KEEPER",
            "KEEPER, false, false, NO_KEEPER_MAP",
            "CLAIMS, true,  false, CLAIMS",
            "CLAIMS, false, true,  CLAIMS_NOT_EXCLUSIVE"})
    void theSettingKeeperMapAndTheDeploymentDecide(LockKind asked, boolean keeperMap, boolean replicated,
                                                   Locks.Choice expected) {
        assertEquals(expected, Locks.choose(asked, keeperMap, replicated));
    }
}
