"""One HTTP POST per call; retries are the client's business. The stdlib transport keeps one
keep-alive connection per thread; the aiohttp one keeps one session per event loop."""
import asyncio
import atexit
import http.client
import os
import threading
import urllib.parse
import weakref

try:
    import aiohttp
except ImportError:  # the optional extra is not installed
    aiohttp = None

# Errors on a reused keep-alive connection that mean the server closed it while it was idle:
# the request never reached the server, so it is sent again at once on a new connection.
_STALE = (ConnectionResetError, BrokenPipeError, http.client.BadStatusLine)

# What a failed attempt raises: the client classifies these as connection errors.
CONNECTION_ERRORS = (OSError, http.client.HTTPException, asyncio.TimeoutError)

# Requests in flight at once from one client and event loop (aiohttp's pool; threads of the
# standard-library path): a verl worker's chunk of single-sample calls goes out together,
# within a process's usual 1024 open files.
MAX_CONNECTIONS = 512
if aiohttp is not None:
    CONNECTION_ERRORS = CONNECTION_ERRORS + (aiohttp.ClientError,)


class StdlibTransport:
    """http.client, one connection per thread; usable from any number of threads."""

    def __init__(self, url, timeout_s):
        parts = urllib.parse.urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._base_path = parts.path.rstrip("/")
        self._timeout_s = timeout_s
        self._forget_connections()

    def _forget_connections(self):
        """Starts with no connection: at first, and in a child process after a fork. The
        child's copies of the parent's sockets are left alone (closing them could end the
        parent's exchanges): sent on by both, a socket would hand each process the other's
        answers, another sample's score."""
        self._pid = os.getpid()
        self._local = threading.local()
        self._lock = threading.Lock()  # a fork may copy it held by another thread
        self._open = weakref.WeakSet()

    def _new_connection(self):
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self._timeout_s)
        with self._lock:
            self._open.add(conn)
        return conn

    def post(self, path, body, headers):
        """Returns (status, headers with lower-case names, body bytes)."""
        return self.request("POST", path, body, headers)

    def get(self, path, headers):
        """post() for a GET without a body."""
        return self.request("GET", path, None, headers)

    def request(self, method, path, body, headers):
        if self._pid != os.getpid():
            self._forget_connections()
        conn = getattr(self._local, "conn", None)
        reused = conn is not None
        if conn is None:
            conn = self._local.conn = self._new_connection()
        try:
            return self._send(conn, method, path, body, headers)
        except _STALE:
            self._drop(conn)
            if not reused:
                raise
        conn = self._local.conn = self._new_connection()
        try:
            return self._send(conn, method, path, body, headers)
        except BaseException:
            self._drop(conn)
            raise

    def _send(self, conn, method, path, body, headers):
        try:
            conn.request(method, self._base_path + path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except _STALE:
            raise
        except BaseException:
            self._drop(conn)
            raise
        if resp.will_close:
            self._drop(conn)
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def _drop(self, conn):
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None

    def close(self):
        """Closes every thread's connection (a thread opens a new one on its next call)."""
        if self._pid != os.getpid():
            self._forget_connections()
            return
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            conn.close()


async def _close_when_the_loop_ends(session):
    """Iterated once when `session` is made: asyncio.run (loop.shutdown_asyncgens) closes
    the generators its loop started, and this one then closes the session, so a loop that
    ends without aclose() leaves no open session behind."""
    try:
        yield
    finally:
        await session.close()


def _close_at_exit(transport_ref):
    """At interpreter exit, closes the sessions whose loop still runs in another thread (TRL
    runs async reward functions on a daemon thread's loop, which it only stops at exit: the
    open session's finalizers then printed three tracebacks as Python shut down, helper-70).
    A loop that ended on its own closed its session (`_close_when_the_loop_ends`)."""
    transport = transport_ref()
    if transport is None:
        return
    with transport._lock:
        entries = list(transport._sessions.values())
        transport._sessions.clear()
    for ref, session, closer in entries:
        loop = ref()
        if loop is None or loop.is_closed() or not loop.is_running() or session.closed:
            continue

        async def close(closer=closer):
            await closer.aclose()
            await asyncio.sleep(0.05)  # the transports' close callbacks, as in aclose()

        try:
            asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=2)
        except Exception:  # noqa: BLE001 - the loop stopping meanwhile; nothing else to do
            pass


class AiohttpTransport:
    """aiohttp, one ClientSession per event loop (a session must not cross loops)."""

    def __init__(self, url, timeout_s):
        if aiohttp is None:
            raise ImportError("aiohttp is not installed: pip install 'arbiter-client[aiohttp]'")
        self._url = url
        # The wait for one of the pool's connections is not the attempt's: only connecting
        # and reading count against timeout_s, so a burst larger than the pool waits its turn
        # instead of timing out in the client.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=timeout_s,
                                              sock_read=timeout_s)
        self._forget_sessions()

    def _forget_sessions(self):
        """No session: at first, and in a child process after a fork, whose copies of the
        parent's sessions share its sockets (StdlibTransport._forget_connections)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # id(loop) -> (weak reference to the loop, session, its _close_when_the_loop_ends)
        self._sessions = {}
        self._exit_hook = False

    async def _session(self):
        loop = asyncio.get_running_loop()
        if self._pid != os.getpid():
            self._forget_sessions()
        with self._lock:
            for key, (ref, _, _) in list(self._sessions.items()):
                other = ref()
                if other is None or other.is_closed():
                    del self._sessions[key]  # its loop is gone; so is any use of it
            entry = self._sessions.get(id(loop))
            if entry is not None and entry[0]() is loop and not entry[1].closed:
                return entry[1]
            session = aiohttp.ClientSession(
                timeout=self._timeout, connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS))
            closer = _close_when_the_loop_ends(session)
            self._sessions[id(loop)] = (weakref.ref(loop), session, closer)
            if not self._exit_hook:
                # Registered after the trainer's own (atexit runs the last first), so it runs
                # while a loop the trainer stops at exit still runs.
                atexit.register(_close_at_exit, weakref.ref(self))
                self._exit_hook = True
        await closer.__anext__()
        return session

    async def post(self, path, body, headers):
        """Returns (status, headers with lower-case names, body bytes)."""
        session = await self._session()
        async with session.post(self._url + path, data=body, headers=headers) as resp:
            data = await resp.read()
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, data

    async def aclose(self):
        """Closes the running loop's session."""
        loop = asyncio.get_running_loop()
        if self._pid != os.getpid():
            self._forget_sessions()
        with self._lock:
            entry = self._sessions.pop(id(loop), None)
        if entry is not None and entry[0]() is loop:
            await entry[2].aclose()
            # aiohttp's "graceful shutdown" advice: give the transports' close callbacks a
            # moment to run before the loop ends, or their sockets are left to the GC.
            await asyncio.sleep(0.05)
