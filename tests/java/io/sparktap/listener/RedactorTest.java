package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/** The shared redaction patterns, as the listener applies them: the canaries of tests/java/redaction_cases.tsv. */
class RedactorTest {
    static Stream<Arguments> cases() throws IOException {
        String path = System.getProperty("sparktap.redaction.cases", "tests/java/redaction_cases.tsv");
        List<Arguments> out = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get(path), StandardCharsets.UTF_8)) {
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            String[] parts = line.split("\t", -1);
            assertEquals(2, parts.length, "a case is <text> TAB <expected>: " + line);
            String text = parts[0].replace("<MASK>", Redactor.MASK);
            String expected = parts[1].equals("=") ? text : parts[1].replace("<MASK>", Redactor.MASK);
            out.add(Arguments.of(text, expected));
        }
        return out.stream();
    }

    private static Redactor redactor(ListenerConfig.Descriptions mode) throws IOException {
        return Redactor.withDefaults(mode);
    }

    @ParameterizedTest
    @MethodSource("cases")
    void canaryIsMaskedInFreeTextAndDescriptions(String text, String expected) throws IOException {
        Redactor r = redactor(ListenerConfig.Descriptions.REDACTED);
        assertEquals(expected, r.text(text));
        assertEquals(expected, r.description(text, Redactor.TEXT_MAX_CHARS));
        assertEquals(expected, r.text(expected)); // masking twice changes nothing
    }

    @Test
    void fullDescriptionsStillMaskUrlCredentialsOnly() throws IOException {
        Redactor r = redactor(ListenerConfig.Descriptions.FULL);
        String text = "load s3a://AK:wJal/K7MD@bucket/p with token=T1 via jdbc:oracle:thin:scott/tiger@db:1521/x";
        assertEquals("load s3a://***@bucket/p with token=T1 via jdbc:oracle:thin:***@db:1521/x",
                r.description(text, 10_000));
        assertEquals("load s3a://***@bucket/p with token=" + Redactor.MASK + " via jdbc:oracle:thin:***@db:1521/x",
                r.text(text, 10_000));
    }

    @Test
    void descriptionsOffSendNothing() throws IOException {
        assertNull(redactor(ListenerConfig.Descriptions.OFF).description("password=x", 100));
    }

    @Test
    void allowListedPropertyWithASecretValueIsNotSent() throws IOException {
        Redactor r = redactor(ListenerConfig.Descriptions.REDACTED);
        assertTrue(r.propertyAllowed("spark.sql.shuffle.partitions", "200"));
        assertTrue(r.propertyAllowed("spark.shuffle.service.url", "https://shuffle.example.com:7337/x"));
        assertFalse(r.propertyAllowed("spark.shuffle.service.url", "https://u:p/w@shuffle.example.com/x"));
        assertFalse(r.propertyAllowed("spark.shuffle.note", "sig=AbC%2B"));
        assertFalse(r.propertyAllowed("spark.dynamicAllocation.x", "fs.azure.account.key.a.b=Zm9v+/="));
        assertFalse(r.propertyAllowed("spark.foo.password", "x")); // not allow-listed
        assertFalse(r.propertyAllowed("spark.sql.adaptive.canary.secret", "plain")); // spark.redaction.regex
    }

    @Test
    void sparkStringRedactionRegexAppliesAfterTheSharedPatternsAndTextIsTruncated() throws IOException {
        Redactor r = new Redactor(Redactor.loadPatterns(), Pattern.compile(Redactor.DEFAULT_REDACTION_REGEX),
                new Pattern[] {Pattern.compile("CANARY_\\w+")}, ListenerConfig.Descriptions.FULL);
        assertEquals("a " + Redactor.MASK + " b", r.description("a CANARY_X1 b", 100));
        assertEquals("abcdef", Redactor.truncate("abcdef", 6));
        assertEquals("abcdefghijklmnopqr…[truncated 82 chars]", Redactor.truncate(alphabet(100), 40));
        String emoji = "\ud83d\ude00";
        String cut = Redactor.truncate(repeat('a', 17) + emoji + repeat('b', 100), 40);
        assertEquals(repeat('a', 17) + "…[truncated 102 chars]", cut); // never half a surrogate pair
    }

    private static String repeat(char c, int n) {
        StringBuilder sb = new StringBuilder(n);
        for (int i = 0; i < n; i++) {
            sb.append(c);
        }
        return sb.toString();
    }

    private static String alphabet(int n) {
        StringBuilder sb = new StringBuilder(n);
        for (int i = 0; i < n; i++) {
            sb.append((char) ('a' + i % 26));
        }
        return sb.toString();
    }

    @Test
    void anOverLongNameKeepsItsStartAndCountsWhatItLeftOut() {
        // the room kept for the marker is the marker of the whole length: 256 - len("…[truncated 100000 chars]")
        assertEquals(repeat('u', 231) + "…[truncated 99769 chars]", Redactor.name(repeat('u', 100_000)));
        assertEquals(repeat('u', 230) + "…[truncated 1048346 chars]", Redactor.name(repeat('u', 1_048_576)));
        assertEquals(repeat('u', 256), Redactor.name(repeat('u', 256)));
    }

    @Test
    void aNameIsMaskedAndLosesEveryControlCharacter() {
        assertEquals("password=" + Redactor.MASK, Redactor.name("password=hunter2"));
        assertEquals("ali]0;evilce", Redactor.name("ali\u001b]0;evil\u0007ce\r\n\t\u0085"));
        assertEquals("ordersDROPgpj.exex", Redactor.name("orders\u2028DROP\u2029\u202egpj.exe\u2066x\u2069"));
        assertEquals("alice", Redactor.name("alice"));
    }

    @Test
    void freeTextKeepsTabAndNewlineOnly() throws IOException {
        Redactor r = redactor(ListenerConfig.Descriptions.REDACTED);
        assertEquals("SELECT a,\tb\nFROM t[2J", r.text("SELECT a,\tb\r\nFROM t\u001b[2J\u0000"));
    }

    @Test
    void aSecretStraddlingTheCutIsMaskedBeforeTheCut() {
        String value = repeat('x', 200) + " password=hunter2hunter2hunter2 " + repeat('y', 100_000);
        assertEquals(repeat('x', 200) + " password=" + Redactor.MASK + " y…[truncated 99999 chars]",
                Redactor.name(value));
    }

    @Test
    void theWorkPerValueIsBounded() {
        // a value built to make the name=value pattern backtrack over the whole of it: only its window is looked at
        StringBuilder hostile = new StringBuilder();
        for (int i = 0; i < 131_072; i++) {
            hostile.append("password");
        }
        String out = org.junit.jupiter.api.Assertions.assertTimeoutPreemptively(java.time.Duration.ofSeconds(5),
                () -> Redactor.name(hostile.toString()));
        assertTrue(out.endsWith("…[truncated 1048346 chars]"), out);
    }

    @Test
    void everyPatternOfTheFileIsLoadedInOrder() throws IOException {
        Redactor.SecretPattern[] patterns = Redactor.loadPatterns();
        assertEquals(10, patterns.length);
        assertTrue(patterns[0].url && patterns[1].url && !patterns[2].url);
    }

    @Test
    void aBadPatternFileNamesTheLine() {
        IOException e = assertThrows(IOException.class, () -> Redactor.parsePatterns("# c\nurl (a\n"));
        assertTrue(e.getMessage().startsWith("redaction-patterns.txt line 2: "), e.getMessage());
        e = assertThrows(IOException.class, () -> Redactor.parsePatterns("word x(y)\n"));
        assertEquals("redaction-patterns.txt line 1: expected \"url <regex>\" or \"secret <regex>\"", e.getMessage());
        e = assertThrows(IOException.class, () -> Redactor.parsePatterns("secret abc\n"));
        assertEquals("redaction-patterns.txt line 1: the regex has no group", e.getMessage());
    }
}
