// JavacWorker is a persistent worker around the JDK's compiler, written
// for Gantry's tests and benchmark: with --persistent_worker it reads
// WorkRequests (binary protobuf, varint-length-delimited) on stdin and
// compiles each request's arguments with one warm javax.tools compiler;
// without it, it compiles the arguments of its @REQUEST_FILE once and
// exits (a cold start, the protocol's fallback).
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import javax.tools.*;

public final class JavacWorker {
  private static final JavaCompiler COMPILER = ToolProvider.getSystemJavaCompiler();

  public static void main(String[] args) throws IOException {
    boolean persistent = false;
    String requestFile = null;
    for (String a : args) {
      if (a.equals("--persistent_worker")) {
        persistent = true;
      } else if (a.startsWith("@")) {
        requestFile = a.substring(1);
      }
    }
    if (!persistent) {
      List<String> reqArgs = Files.readAllLines(Paths.get(requestFile), StandardCharsets.UTF_8);
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      int code = compile(reqArgs, out);
      System.err.print(out.toString(StandardCharsets.UTF_8));
      System.exit(code);
    }
    InputStream in = new BufferedInputStream(System.in);
    OutputStream stdout = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out));
    // Nothing else may reach stdout: it carries the protocol.
    System.setOut(System.err);
    while (true) {
      long len = readVarint(in);
      if (len < 0) {
        return; // stdin closed: the worker is done with us
      }
      byte[] msg = in.readNBytes((int) len);
      List<String> reqArgs = new ArrayList<>();
      int requestId = 0;
      int i = 0;
      while (i < msg.length) {
        long[] tag = varint(msg, i);
        i = (int) tag[1];
        int field = (int) (tag[0] >>> 3), wire = (int) (tag[0] & 7);
        if (wire == 0) {
          long[] v = varint(msg, i);
          i = (int) v[1];
          if (field == 3) {
            requestId = (int) v[0];
          }
        } else if (wire == 2) {
          long[] n = varint(msg, i);
          int start = (int) n[1];
          i = start + (int) n[0];
          if (field == 1) {
            reqArgs.add(new String(msg, start, (int) n[0], StandardCharsets.UTF_8));
          }
        } else {
          throw new IOException("unexpected wire type " + wire);
        }
      }
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      int code = compile(reqArgs, out);
      ByteArrayOutputStream resp = new ByteArrayOutputStream();
      if (code != 0) {
        resp.write(0x08);
        writeVarint(resp, code);
      }
      byte[] text = out.toByteArray();
      if (text.length > 0) {
        resp.write(0x12);
        writeVarint(resp, text.length);
        resp.write(text);
      }
      if (requestId != 0) {
        resp.write(0x18);
        writeVarint(resp, requestId);
      }
      writeVarint(stdout, resp.size());
      resp.writeTo(stdout);
      stdout.flush();
    }
  }

  private static int compile(List<String> args, ByteArrayOutputStream out) {
    return COMPILER.run(null, out, out, args.toArray(new String[0]));
  }

  private static long readVarint(InputStream in) throws IOException {
    long v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      int b = in.read();
      if (b < 0) {
        return -1;
      }
      v |= (long) (b & 0x7f) << shift;
      if (b < 0x80) {
        return v;
      }
    }
    throw new IOException("varint too long");
  }

  private static long[] varint(byte[] b, int i) throws IOException {
    long v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i >= b.length) {
        throw new IOException("truncated varint");
      }
      int c = b[i++] & 0xff;
      v |= (long) (c & 0x7f) << shift;
      if (c < 0x80) {
        return new long[] {v, i};
      }
    }
    throw new IOException("varint too long");
  }

  private static void writeVarint(OutputStream out, long v) throws IOException {
    while ((v & ~0x7fL) != 0) {
      out.write((int) ((v & 0x7f) | 0x80));
      v >>>= 7;
    }
    out.write((int) v);
  }
}
