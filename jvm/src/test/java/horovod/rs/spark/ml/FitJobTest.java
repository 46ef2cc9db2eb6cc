package horovod.rs.spark.ml;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.Test;

public class FitJobTest {
    private static final StructType SCHEMA = new StructType()
            .add("x", DataTypes.DoubleType).add("isVal", DataTypes.BooleanType).add("name", DataTypes.StringType);

    @Test
    public void validationIsAColumnAFractionOrNothing() {
        assertEquals("isVal", FitJob.Validation.parse("isVal", SCHEMA).column());
        assertEquals(0.25, FitJob.Validation.parse("0.25", SCHEMA).fraction(), 0);
        assertNull(FitJob.Validation.parse("", SCHEMA).column());
    }

    @Test
    public void badValidationIsNamed() {
        IllegalArgumentException notAColumn = assertThrows(IllegalArgumentException.class,
                () -> FitJob.Validation.parse("isValid", SCHEMA));
        assertTrue(notAColumn.getMessage(), notAColumn.getMessage().contains("'isValid' is neither a column"));
        assertTrue(notAColumn.getMessage(), notAColumn.getMessage().contains("isVal"));
        IllegalArgumentException outOfRange = assertThrows(IllegalArgumentException.class,
                () -> FitJob.Validation.parse("1.5", SCHEMA));
        assertTrue(outOfRange.getMessage(), outOfRange.getMessage().contains("fraction in (0, 1)"));
        IllegalArgumentException stringColumn = assertThrows(IllegalArgumentException.class,
                () -> FitJob.Validation.parse("name", SCHEMA));
        assertTrue(stringColumn.getMessage(), stringColumn.getMessage().contains("'name' is string"));
    }

    @Test
    public void ranksWithDifferentWeightsFailTheFit() {
        FitResult first = new FitResult(0, 10, 0, "aa", new byte[] {1}, "[]");
        assertEquals(first, FitJob.checkIdentical(java.util.List.of(first, new FitResult(1, 9, 0, "aa", null, null))));
        horovod.rs.spark.HorovodException e = assertThrows(horovod.rs.spark.HorovodException.class,
                () -> FitJob.checkIdentical(java.util.List.of(first, new FitResult(1, 9, 0, "bb", null, null))));
        assertEquals("rank 1 ended with weights different from rank 0's (bb vs aa)", e.getMessage());
    }

    @Test
    public void progressLinesShowEpochSpeedAndMetrics() throws Exception {
        String line = Progress.formatEpoch(new ObjectMapper().readTree("{\"epoch\": 2, \"samples_per_second\": 12345.6,"
                + " \"train\": {\"loss\": 0.5, \"mae\": 0.25}, \"val\": {\"loss\": 0.75}, \"best\": true}"));
        assertEquals("epoch 3: 12346 samples/s, loss=0.500000 mae=0.250000 val_loss=0.750000 (best)", line);
    }
}
