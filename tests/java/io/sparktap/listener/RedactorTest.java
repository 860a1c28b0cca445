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
            String expected = parts[1].equals("=") ? parts[0] : parts[1].replace("<MASK>", Redactor.MASK);
            out.add(Arguments.of(parts[0], expected));
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
        assertEquals(expected, r.text(text, 10_000));
        assertEquals(expected, r.description(text, 10_000));
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
        assertEquals("abc…", Redactor.truncate("abcdef", 3));
        assertEquals("a\ud83d\ude00", Redactor.truncate("a\ud83d\ude00", 3));
        assertEquals("a…", Redactor.truncate("a\ud83d\ude00b", 2)); // never half a surrogate pair
    }

    @Test
    void everyPatternOfTheFileIsLoadedInOrder() throws IOException {
        Redactor.SecretPattern[] patterns = Redactor.loadPatterns();
        assertEquals(8, patterns.length);
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
