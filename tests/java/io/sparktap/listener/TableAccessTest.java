package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Arrays;

import org.junit.jupiter.api.Test;

/**
 * A table_access location loses its user info, query string and fragment before the Redactor sees it; names are
 * unquoted; a plan's strings (event-log replay) are split and read as Spark writes them.
 */
class TableAccessTest {
    @Test
    void userInfoQueryStringAndFragmentAreRemoved() {
        String[][] cases = {
            {"s3a://AKIAEXAMPLE:wJalr/KEY+x@bucket/sales/orders?X-Amz-Signature=abc&X-Amz-Credential=k#frag",
                "s3a://bucket/sales/orders"},
            {"s3a://AKIAEXAMPLE:secret@bucket/p", "s3a://bucket/p"},
            {"abfss://container@account.dfs.core.windows.net/t", "abfss://container@account.dfs.core.windows.net/t"},
            {"abfss://container:KEY@account.dfs.core.windows.net/t", "abfss://account.dfs.core.windows.net/t"},
            {"https://user:pass@host:8443/a/b?sig=1", "https://host:8443/a/b"},
            {"jdbc:postgresql://u:pw@db:5432/x?password=p", "jdbc:postgresql://db:5432/x"},
            {"file:/tmp/bare/signed?X-Amz-Signature=CANARY", "file:/tmp/bare/signed"},
            {"/tmp/a#b", "/tmp/a"},
            {"hdfs://nn:8020/warehouse/db.db/t", "hdfs://nn:8020/warehouse/db.db/t"},
            {"s3://bucket/user@example.com/t", "s3://bucket/user@example.com/t"},
            {"  gs://b/t  ", "gs://b/t"},
            {"", ""},
        };
        for (String[] c : cases) {
            assertEquals(c[1], TableAccess.scrubLocation(c[0]), c[0]);
        }
        assertEquals("", TableAccess.scrubLocation(null));
    }

    @Test
    void aScrubbedLocationThenTakesTheRedactorsPatterns() throws Exception {
        Redactor redactor = Redactor.withDefaults(ListenerConfig.Descriptions.REDACTED);
        String out = redactor.text(TableAccess.scrubLocation("s3a://AKIAIOSFODNN7EXAMPLE@b/p?token=CANARY"), 1000);
        assertEquals("s3a://b/p", out);
    }

    @Test
    void namesAreUnquotedAndSplitAtTheCatalog() {
        assertEquals("spark_catalog.db.t", TableAccess.unquote("`spark_catalog`.`db`.`t`"));
        assertEquals("we`ird.t", TableAccess.unquote("`we``ird`.`t`"));
        TableAccess a = new TableAccess(0, TableAccess.WRITE, "AppendData");
        a.qualifiedName("lake.db.orders", true);
        assertEquals(Arrays.asList("lake", "db.orders"), Arrays.asList(a.catalog, a.table));
        TableAccess b = new TableAccess(0, TableAccess.READ, "Scan parquet");
        b.qualifiedName("db.orders", true);
        assertEquals(Arrays.asList("", "db.orders"), Arrays.asList(b.catalog, b.table));
    }

    @Test
    void formatsFollowTheContract() {
        String[][] cases = {{"Parquet", "parquet"}, {"DeltaParquetFileFormat", "delta"}, {"iceberg/parquet", "iceberg"},
            {"org.apache.spark.sql.hive.execution.HiveFileFormat", "hive"}, {"ORC", "orc"}, {"CSV", "csv"},
            {"JSON", "json"}, {"text", "text"}, {"avro", "avro"}, {"jdbc", "jdbc"}, {"kafka", "other"}, {"", ""}};
        for (String[] c : cases) {
            assertEquals(c[1], TableAccess.format(c[0]), c[0]);
        }
    }

    @Test
    void aFileWritesSimpleStringIsSplitAtTopLevelCommas() {
        String args = "file:/w/t, false, Parquet, [path=file:/w/t, a=1], Append, `spark_catalog`.`db`.`t, x`, "
                + "org.apache.spark.sql.execution.datasources.InMemoryFileIndex(file:/w/t), [id, v]";
        assertEquals(Arrays.asList("file:/w/t", "false", "Parquet", "[path=file:/w/t, a=1]", "Append",
                "`spark_catalog`.`db`.`t, x`", "org.apache.spark.sql.execution.datasources.InMemoryFileIndex(file:/w/t)",
                "[id, v]"), TablesReplay.split(args));
        assertEquals("file:/w/a", TablesReplay.firstPath("InMemoryFileIndex(2 paths)[file:/w/a, file:/w/b]"));
        assertEquals("file:/w/t", TablesReplay.firstPath("PreparedDeltaFileIndex(1 paths)[file:/w/t]"));
    }
}
