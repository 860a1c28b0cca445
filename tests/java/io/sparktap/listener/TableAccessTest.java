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

    /** The plan descriptions of a Delta 3.3 MERGE, UPDATE and DELETE as a Spark 3.5 event log holds them. */
    @Test
    void aDeltaCommandsTableIsReadFromItsArgumentsInThePlanDescription() {
        String merge = "== Physical Plan ==\nExecute MergeIntoCommand (1)\n   +- MergeIntoCommand (2)\n\n\n"
                + "(1) Execute MergeIntoCommand\nOutput [4]: [num_affected_rows#3546L]\n\n(2) MergeIntoCommand\n"
                + "Arguments: SubqueryAlias s, SubqueryAlias t, `spark_catalog`.`default`.`delta_changes`, "
                + "Delta[version=1, file:/w/delta_changes], (id#3526L = id#3528L), [Update [actions: [`id` = id#3526L]]]"
                + "\n\n";
        String update = "(2) UpdateCommand\nArguments: Delta[version=2, s3a://b/w/d c], `default`.`delta_changes`, "
                + "[id#4349L, u], (id#4349L < 100)\n\n(3) LogicalRelation\nArguments: parquet, [id#4349L, v#4350], "
                + "`spark_catalog`.`other`.`t`, false\n";
        String delete = "(2) DeleteCommand\nArguments: org.apache.spark.sql.delta.DeltaLog@7ede5720, "
                + "`spark_catalog`.`default`.`delta_changes`, (id#5078L >= 1400)";
        String[][] cases = {
            {merge, "MergeIntoCommand", "spark_catalog", "default.delta_changes", "file:/w/delta_changes"},
            {update, "UpdateCommand", "spark_catalog", "default.delta_changes", "s3a://b/w/d c"},
            {delete, "DeleteCommand", "spark_catalog", "default.delta_changes", ""},
            {merge, "UpdateCommand", "", "", ""}, // not this command's description
            {null, "MergeIntoCommand", "", "", ""},
        };
        for (String[] c : cases) {
            TableAccess a = new TableAccess(0, TableAccess.WRITE, "Execute " + c[1]);
            TablesReplay.deltaTable(a, TablesReplay.arguments(c[0], c[1]));
            assertEquals(Arrays.asList(c[2], c[3], c[4]), Arrays.asList(a.catalog, a.table, a.location), c[1]);
        }
        // Spark 4.1: a DSv2 write's arguments only in its section of the description, after its input
        String start = "(4) AdaptiveSparkPlan\nOutput [2]: [id#132L, v#133]\nArguments: isFinalPlan=false\n\n"
                + "(5) AppendData\nInput [2]: [id#132L, v#133]\nArguments: IcebergWrite(table=lake.db.orders, "
                + "format=PARQUET)\n\n";
        String adaptive = "(8) AppendData\nInput [2]: [id#132L, v#133]\n\n(9) Other\nArguments: x\n";
        assertEquals("IcebergWrite(table=lake.db.orders, format=PARQUET)", TablesReplay.arguments(start, "AppendData"));
        assertEquals("", TablesReplay.arguments(adaptive, "AppendData"));
        // Delta 3.3's OPTIMIZE: the table is its child's, whose arguments print on several lines
        String optimize = "(1) Execute OptimizeTableCommand\nOutput [2]: [path#309, metrics#332]\n\n(2) ResolvedTable\n"
                + "Arguments: org.apache.spark.sql.delta.catalog.DeltaCatalog@737b508b, default.dc, DeltaTableV2(org."
                + "apache.spark.sql.SparkSession@6594627c,file:/w/dc,Some(CatalogTable(\nCatalog: spark_catalog\n"
                + "Database: default\nTable: dc\nType: MANAGED\nProvider: delta\nLocation: file:/w/dc\nPartition "
                + "Provider: Catalog)),Some(default.dc),None,Map()), [id#233L, v#234]\n\n(3) OptimizeTableCommand\n"
                + "Arguments: DeltaOptimizeContext(None,None,None,None,false)\n\n";
        TableAccess o = TablesReplay.optimize("Execute OptimizeTableCommand", optimize, 0).access;
        assertEquals(Arrays.asList("spark_catalog", "default.dc", "file:/w/dc", "delta", "optimize"),
                Arrays.asList(o.catalog, o.table, o.location, o.format, o.writeMode));
    }

    @Test
    void anIcebergRewritesStagedWriteIsItsTablesCompaction() {
        TableAccess write = new TableAccess(0, TableAccess.WRITE, "AppendData");
        write.qualifiedName("480d624b-d7ec-42bc-880a-4d0335832427#rewrite", false);
        write.format = "iceberg";
        write.writeMode = "append";
        TableAccess scan = new TableAccess(3, TableAccess.READ, "BatchScan lake.db.o");
        scan.qualifiedName("lake.db.o", true);
        scan.format = "iceberg";
        TableAccess append = new TableAccess(0, TableAccess.WRITE, "AppendData");
        append.qualifiedName("lake.db.p", true);
        append.format = "iceberg";
        append.writeMode = "append";
        TableAccess.icebergRewrites(Arrays.asList(write, scan), false);
        TableAccess.icebergRewrites(Arrays.asList(append, scan), false);
        assertEquals(Arrays.asList("lake", "db.o", "rewrite_data_files"), Arrays.asList(write.catalog, write.table,
                write.writeMode));
        assertEquals(Arrays.asList("lake", "db.p", "append"), Arrays.asList(append.catalog, append.table,
                append.writeMode));
        TableAccess alone = new TableAccess(0, TableAccess.WRITE, "AppendData");
        alone.qualifiedName("x#rewrite", false);
        alone.format = "iceberg";
        TableAccess.icebergRewrites(Arrays.asList(alone), false);
        assertEquals(Arrays.asList("", "", "rewrite_data_files"), Arrays.asList(alone.catalog, alone.table,
                alone.writeMode));
    }
}
