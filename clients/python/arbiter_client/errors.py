"""The exceptions of arbiter_client. All derive from ArbiterError."""


class ArbiterError(Exception):
    """Base class of every error this package raises (configuration errors are ValueError).

    Raised by score() or ascore(), an error carries `results`: one entry per item given, its
    ItemResult where Arbiter answered it, else None. Elsewhere `results` is None."""

    results = None

    def __reduce__(self):
        # Exception's own pickling calls the class with `args` (the message alone), which the
        # subclasses' __init__ does not take: Ray, ProcessPoolExecutor and multiprocessing
        # then lose the error (or the pool). Each class gives its arguments; the attributes
        # set since (`results`) travel as its state.
        return (self.__class__, self._init_args(), self.__dict__.copy())

    def _init_args(self):
        return self.args


class ArbiterRequestError(ArbiterError):
    """Arbiter refused the request itself (a 4xx other than 429): retrying cannot help.

    `status` is the HTTP status, `code` and `message` come from the error body
    (`invalid_request`, `payload_too_large`, ...), and `field` is the dotted path of the
    offending field when Arbiter named one (`items[3].ground_truth`). Item indexes are those of
    the list given to the client, also when it was sent in several requests.
    """

    def __init__(self, status, code, message, field=None):
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        super().__init__(f"Arbiter answered {status} {code}: {message}")

    def _init_args(self):
        return (self.status, self.code, self.message, self.field)


class ArbiterUnavailable(ArbiterError):
    """Every attempt failed with a retryable outcome (429, 503, another 5xx, a timeout or a
    connection error). `reason` describes the last one; `attempts` counts them."""

    def __init__(self, reason, attempts):
        self.reason = reason
        self.attempts = attempts
        super().__init__(f"Arbiter unavailable after {attempts} attempt(s): {reason}")

    def _init_args(self):
        return (self.reason, self.attempts)


class ArbiterItemError(ArbiterError):
    """An item came back with `status: failed` and the failure policy is `raise`.

    `index` is the item's position in the list given to the client; `code` and `message` are
    Arbiter's (`upstream_failed`, `deadline_exceeded`, `reward_failed`, ...); `result` is the
    item's whole result object as Arbiter sent it.
    """

    def __init__(self, index, code, message, result=None):
        self.index = index
        self.code = code
        self.message = message
        self.result = result
        super().__init__(f"item {index} failed: {code}: {message}")

    def _init_args(self):
        return (self.index, self.code, self.message, self.result)
