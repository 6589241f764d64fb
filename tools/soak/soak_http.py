# A minimal asyncio HTTP/1.1 client for tools/soak/soak.py (standard library only): one keep-alive
# connection per worker, bodies read as they arrive (SSE), chunked transfer coding removed in any split,
# and an abort that drops the socket at once. Only what the soak needs: POST with a body, no redirects,
# no compression, no pipelining.
import asyncio
import errno
import ssl
import urllib.parse
from dataclasses import dataclass


class ProtocolError(Exception):
    pass


class Connection:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    def close(self):
        # abort(), not close(): an aborting client drops the socket at once, whatever is still buffered.
        self.writer.transport.abort()


@dataclass
class Endpoint:
    host: str
    port: int
    tls: bool

    @staticmethod
    def from_base(base):
        u = urllib.parse.urlsplit(base)
        tls = u.scheme == "https"
        return Endpoint(host=u.hostname, port=u.port or (443 if tls else 80), tls=tls)

    def host_header(self):
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{h}:{self.port}"

    async def connect(self):
        ctx = ssl.create_default_context() if self.tls else None
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=ctx)
        return Connection(reader, writer)


class ChunkedDecoder:
    """Removes the chunked transfer coding from bytes fed in any split (RFC 9112 section 7.1)."""

    def __init__(self):
        self.pending = b""  # bytes of a size line, chunk terminator or trailer not yet complete
        self.left = 0  # data bytes still to come in the current chunk
        self.state = "size"  # size | data | crlf | trailer | done
        self.surplus = False

    @property
    def finished(self):
        return self.state == "done"

    def feed(self, raw):
        out = []
        buf = self.pending + raw
        self.pending = b""
        i = 0
        while i < len(buf) and self.state != "done":
            if self.state == "data":
                take = min(self.left, len(buf) - i)
                out.append(buf[i:i + take])
                i += take
                self.left -= take
                if self.left == 0:
                    self.state = "crlf"
                continue
            end = buf.find(b"\r\n", i)
            if end < 0:
                self.pending = buf[i:]
                if len(self.pending) > 8192:
                    raise ProtocolError("chunk size line or trailer too long")
                break
            line = buf[i:end]
            i = end + 2
            if self.state == "crlf":
                if line:
                    raise ProtocolError("bad chunk terminator")
                self.state = "size"
            elif self.state == "size":
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {line[:40]!r}") from None
                self.left, self.state = size, ("data" if size else "trailer")
            elif not line:  # the empty line that ends the trailers
                self.state = "done"
        if self.state == "done" and i < len(buf):
            self.surplus = True
        return b"".join(out)


@dataclass
class Response:
    status: int
    headers: dict  # lower-case name -> value (the last one of a repeated header)
    conn: Connection
    keep_alive: bool
    _framing: tuple = ("close", 0)  # ("length", n) | ("chunked", 0) | ("close", 0)
    complete: bool = False

    async def chunks(self):
        """The body's bytes as they arrive: each piece is what one read of the socket returned (so a reader
        that pauses gets everything that arrived meanwhile at once, as fetch's body reader does), with the
        chunked transfer coding removed."""
        r = self.conn.reader
        kind, n = self._framing
        if kind == "length":
            left = n
            while left > 0:
                b = await r.read(min(left, 65536))
                if not b:
                    raise ProtocolError("connection closed inside the body")
                left -= len(b)
                yield b
        elif kind == "chunked":
            dec = ChunkedDecoder()
            while not dec.finished:
                raw = await r.read(65536)
                if not raw:
                    raise ProtocolError("connection closed inside a chunked body")
                data = dec.feed(raw)
                if data:
                    yield data
            if dec.surplus:  # bytes after the body: the connection is not in a known state
                self.keep_alive = False
        else:
            while b := await r.read(65536):
                yield b
            self.keep_alive = False
        self.complete = True

    async def read(self):
        return b"".join([b async for b in self.chunks()])


async def read_head(conn, method):
    lines = []
    while True:
        line = await conn.reader.readuntil(b"\r\n")
        if line == b"\r\n":
            if not lines:
                continue
            break
        lines.append(line[:-2].decode("latin-1"))
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    status = int(parts[1])
    headers = {}
    for h in lines[1:]:
        name, _, value = h.partition(":")
        headers[name.strip().lower()] = value.strip()
    if 100 <= status < 200:  # an interim response: the real one follows
        return await read_head(conn, method)
    conn_hdr = headers.get("connection", "").lower()
    keep_alive = "close" not in conn_hdr and (parts[0] != "HTTP/1.0" or "keep-alive" in conn_hdr)
    if method == "HEAD" or status in (204, 304):
        framing = ("length", 0)
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        framing = ("chunked", 0)
    elif "content-length" in headers:
        framing = ("length", int(headers["content-length"]))
    else:
        framing = ("close", 0)
    return Response(status=status, headers=headers, conn=conn, keep_alive=keep_alive, _framing=framing)


class Client:
    """A worker's client: reuses its one keep-alive connection like fetch's pool does, and opens a new one
    when the last response did not end cleanly (an abort, an error, `Connection: close`)."""

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.idle = None

    async def post(self, path, body, content_type="application/json"):
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.endpoint.host_header()}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n").encode("latin-1")
        if self.idle and self.idle.reader.at_eof():  # the server closed it while it was idle
            self.close()
        conn, reused = (self.idle, True) if self.idle else (await self.endpoint.connect(), False)
        self.idle = None
        try:
            conn.writer.write(head + body)
            await conn.writer.drain()
            return await read_head(conn, "POST")
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            conn.close()
            # The server may close an idle keep-alive connection just as it is reused: when not a byte of
            # the response came back, once more on a new connection.
            if reused and not getattr(e, "partial", b""):
                return await self.post(path, body, content_type)
            if isinstance(e, asyncio.IncompleteReadError):
                raise ConnectionResetError(errno.ECONNRESET, "other side closed") from e
            raise
        except BaseException:
            conn.close()
            raise

    def release(self, res):
        """After a response: keep its connection for the next request if it ended cleanly, else close it."""
        if res.complete and res.keep_alive and self.idle is None:
            self.idle = res.conn
        else:
            res.conn.close()

    def close(self):
        if self.idle:
            self.idle.close()
            self.idle = None
