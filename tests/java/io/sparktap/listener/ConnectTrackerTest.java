package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.Arrays;

import org.junit.jupiter.api.Test;

/** A Spark Connect user id is a name its client chose: cleaned where it is parsed out of a job tag (issue 41). */
class ConnectTrackerTest {
    private static final String SESSION = "0f6d9f0e-2f4c-4a57-9d8c-3a1f5e2b7c11";
    private static final String OPERATION = "8e3b1c2d-4f5a-4b6c-8d7e-9f0a1b2c3d4e";

    private static String tag(String user) {
        return ConnectTracker.TAG_PREFIX + user + "_Session_" + SESSION + "_Operation_" + OPERATION;
    }

    private static String repeat(char c, int n) {
        StringBuilder sb = new StringBuilder(n);
        for (int i = 0; i < n; i++) {
            sb.append(c);
        }
        return sb.toString();
    }

    @Test
    void aSecretInTheUserIdIsMaskedInEveryEventThatCarriesIt() {
        ConnectTracker.Who who = ConnectTracker.who(Arrays.asList("team-x", tag("password=hunter2")));
        assertEquals("password=" + Redactor.MASK, who.user);
        assertEquals(SESSION, who.session);
        assertEquals(OPERATION, who.operation);
    }

    @Test
    void aLongUserIdIsCutAndTheTagWrittenAgainFromTheCleanParts() throws IOException {
        Redactor r = Redactor.withDefaults(ListenerConfig.Descriptions.REDACTED);
        String user = repeat('u', 100_000);
        ConnectTracker.Who who = ConnectTracker.parse(tag(user));
        assertEquals(repeat('u', 231) + "…[truncated 99769 chars]", who.user);
        assertEquals(tag(who.user), ConnectTracker.safeTag(r, tag(user)));
        assertEquals("team-x", ConnectTracker.safeTag(r, "team-x"));
        assertEquals("token=" + Redactor.MASK, ConnectTracker.safeTag(r, "token=t0k"));
    }

    @Test
    void controlCharactersNeverLeaveInAUserId() {
        ConnectTracker.Who who = ConnectTracker.parse(tag("bob\u001b]0;pwned\u0007\r\n"));
        assertEquals("bob]0;pwned", who.user);
        assertTrue(ConnectTracker.parse("SparkConnect_OperationTag_User_x") == null);
    }
}
