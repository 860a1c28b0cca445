package io.sparktap.listener;

import org.apache.spark.sql.catalyst.expressions.codegen.ByteCodeStats;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeAndComment;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.GeneratedClass;
import org.apache.spark.sql.execution.WholeStageCodegenExec;

import scala.Tuple2;

/**
 * The largest generated method of a whole-stage codegen stage, in bytecode bytes: what Spark compares with
 * {@code spark.sql.codegen.hugeMethodLimit} before it runs the stage interpreted instead
 * ({@code WholeStageCodegenExec.doExecute}, "Found too long generated codes").
 *
 * <p>The same two calls as Spark's {@code EXPLAIN CODEGEN} ({@code debug.codegenStringSeq}): regenerate the stage's
 * source and compile it. The stage was compiled when it ran, so the compile is usually a hit in Spark's code cache
 * (keyed on the source, {@code spark.sql.codegen.cache.maxEntries}); a miss compiles again. Measured 2-6 ms per stage
 * on the listener-bus thread (bench/listener_plan_streaming.py), hence opt-in ({@code spark.sparktap.plan.codegenStats})
 * and capped per execution. In its own class so that a Spark without these APIs only loses this figure
 * ({@link SqlTracker} catches the linkage error).
 */
final class CodegenSize {
    /** The source did not compile: Spark ran the stage interpreted (spark.sql.codegen.fallback) or failed it. */
    static final int COMPILE_ERROR = -2;

    private CodegenSize() {
    }

    /** The stage's largest generated method in bytes, {@link #COMPILE_ERROR}, or -1 when Spark has no figure. */
    static int maxMethodBytes(WholeStageCodegenExec stage) throws Exception {
        Tuple2<CodegenContext, CodeAndComment> generated = stage.doCodeGen();
        Tuple2<GeneratedClass, ByteCodeStats> compiled;
        try {
            compiled = CodeGenerator.compile(generated._2());
        } catch (Exception e) { // Janino's CompileException is checked, and Scala throws it undeclared
            if (isCompileError(e)) {
                return COMPILE_ERROR;
            }
            throw e;
        }
        int size = compiled._2().maxMethodCodeSize();
        return size >= 0 ? size : -1; // ByteCodeStats.UNAVAILABLE is -1
    }

    /** Janino's errors, which CodeGenerator rethrows (wrapped or not) when the generated source does not compile. */
    static boolean isCompileError(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t.getClass().getName().startsWith("org.codehaus.")) {
                return true;
            }
        }
        return false;
    }
}
