package horovod.rs.spark;

import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import scala.collection.Iterator;

/** Placeholder with the agreed API until the Arrow import lands. */
public final class NativeTable extends NativeHandle {
    private NativeTable(long handle) {
        super("table", handle, h -> {});
    }

    public static NativeTable fromRows(Iterator<InternalRow> rows, StructType schema, List<String> columns,
            List<String> labelColumns, boolean dropInvalidRows, long maxRows) {
        throw new UnsupportedOperationException();
    }

    public long rows() {
        return 0;
    }

    public long droppedRows() {
        return 0;
    }
}
