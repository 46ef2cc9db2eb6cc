package horovod.rs.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;
import java.util.stream.Collectors;

/**
 * Loads the native engine once per class loader.
 *
 * <p>The library travels inside the jar under {@code native/<os>-<arch>/}, one folder per platform
 * the jar was built for, which {@code native/platforms.txt} lists. It is copied to
 * a fresh temporary file and loaded from there: a JVM refuses to load one file from two class
 * loaders, and Spark may load the jar in more than one. Once loaded, the copy is deleted (except on
 * Windows, which locks a loaded file): an executor killed without running its shutdown hooks would
 * otherwise leave one copy per JVM in the temporary directory. The system property
 * {@value #LIBRARY_PROPERTY} points at a library built elsewhere (a developer's cargo build).
 */
public final class NativeLibrary {
    /** System property naming a native library file to load instead of the jar's copy. */
    public static final String LIBRARY_PROPERTY = "horovod.rs.native.library";

    private static final String LIBRARY_BASE_NAME = "horovod_rs_jni";
    private static boolean loaded;

    private NativeLibrary() {}

    /** Loads the library unless this class loader has already; safe to call from any thread. */
    public static synchronized void load() {
        if (loaded) {
            return;
        }
        String override = System.getProperty(LIBRARY_PROPERTY);
        Path extracted = override == null ? extractFromJar() : null;
        String path = override != null ? override : extracted.toString();
        try {
            System.load(path);
        } catch (UnsatisfiedLinkError e) {
            throw new HorovodException("cannot load the horovod-rs native library from " + path + " ("
                    + e.getMessage() + ") on " + platformFolder(osName(), osArch()) + "; the jar's libraries need "
                    + "glibc 2.17 or newer on Linux", e);
        } finally {
            if (extracted != null && !osName().toLowerCase(Locale.ROOT).startsWith("windows")) {
                extracted.toFile().delete();
            }
        }
        loaded = true;
    }

    /** The jar folder that holds the library for this OS and CPU, e.g. {@code linux-x86_64}. */
    static String platformFolder(String osName, String osArch) {
        String os = osName.toLowerCase(Locale.ROOT);
        String arch = osArch.toLowerCase(Locale.ROOT);
        String osPart = os.startsWith("mac") || os.startsWith("darwin") ? "darwin"
                : os.startsWith("linux") ? "linux"
                : os.startsWith("windows") ? "windows"
                : os.replaceAll("\\W", "");
        String archPart = arch.equals("amd64") || arch.equals("x86_64") || arch.equals("x64") ? "x86_64"
                : arch.equals("aarch64") || arch.equals("arm64") ? "aarch64"
                : arch.replaceAll("\\W", "");
        return osPart + "-" + archPart;
    }

    /** The library's file name on this OS, e.g. {@code libhorovod_rs_jni.so}. */
    static String libraryFileName(String osName) {
        String os = osName.toLowerCase(Locale.ROOT);
        if (os.startsWith("mac") || os.startsWith("darwin")) {
            return "lib" + LIBRARY_BASE_NAME + ".dylib";
        }
        if (os.startsWith("windows")) {
            return LIBRARY_BASE_NAME + ".dll";
        }
        return "lib" + LIBRARY_BASE_NAME + ".so";
    }

    private static Path extractFromJar() {
        String resource = "/native/" + platformFolder(osName(), osArch()) + "/" + libraryFileName(osName());
        try (InputStream in = NativeLibrary.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new HorovodException(missingPlatform(platformFolder(osName(), osArch()), jarPlatforms(),
                        libraryFileName(osName())));
            }
            Path file = Files.createTempFile("horovod-rs-", "-" + libraryFileName(osName()));
            file.toFile().deleteOnExit();
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            return file;
        } catch (IOException e) {
            throw new HorovodException("cannot extract the horovod-rs native library " + resource
                    + " to a temporary file: " + e.getMessage(), e);
        }
    }

    /** Why there is nothing to load: this platform, the jar's, and what to do. */
    static String missingPlatform(String platform, String jarPlatforms, String libraryFile) {
        return "this horovod-rs jar has no native library for " + platform + ", only for " + jarPlatforms
                + "; run on one of those, build the jar on this platform (`make jar`), or point -D" + LIBRARY_PROPERTY
                + " at a " + libraryFile + " built for it";
    }

    /** The platforms this jar has libraries for, as native/platforms.txt lists them. */
    private static String jarPlatforms() {
        try (InputStream in = NativeLibrary.class.getResourceAsStream("/native/platforms.txt")) {
            if (in == null) {
                return "none (native/platforms.txt is missing)";
            }
            BufferedReader lines = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
            return lines.lines().map(String::trim).filter(line -> !line.isEmpty()).collect(Collectors.joining(", "));
        } catch (IOException e) {
            return "unknown (" + e.getMessage() + ")";
        }
    }

    private static String osName() {
        return System.getProperty("os.name", "unknown");
    }

    private static String osArch() {
        return System.getProperty("os.arch", "unknown");
    }
}
