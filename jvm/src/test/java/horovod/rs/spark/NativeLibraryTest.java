package horovod.rs.spark;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class NativeLibraryTest {
    @Test
    public void platformFolderNormalisesOsAndArch() {
        assertEquals("linux-x86_64", NativeLibrary.platformFolder("Linux", "amd64"));
        assertEquals("linux-x86_64", NativeLibrary.platformFolder("Linux", "x86_64"));
        assertEquals("linux-aarch64", NativeLibrary.platformFolder("Linux", "aarch64"));
        assertEquals("darwin-aarch64", NativeLibrary.platformFolder("Mac OS X", "aarch64"));
        assertEquals("windows-x86_64", NativeLibrary.platformFolder("Windows 11", "amd64"));
    }

    @Test
    public void libraryFileNameFollowsTheOs() {
        assertEquals("libhorovod_rs_jni.so", NativeLibrary.libraryFileName("Linux"));
        assertEquals("libhorovod_rs_jni.dylib", NativeLibrary.libraryFileName("Mac OS X"));
        assertEquals("horovod_rs_jni.dll", NativeLibrary.libraryFileName("Windows 11"));
    }

    @Test
    public void aMissingPlatformNamesTheJarsPlatforms() {
        assertEquals("this horovod-rs jar has no native library for darwin-aarch64, only for linux-aarch64, "
                + "linux-x86_64; run on one of those, build the jar on this platform (`make jar`), or point "
                + "-Dhorovod.rs.native.library at a libhorovod_rs_jni.dylib built for it",
                NativeLibrary.missingPlatform("darwin-aarch64", "linux-aarch64, linux-x86_64", "libhorovod_rs_jni.dylib"));
    }
}
