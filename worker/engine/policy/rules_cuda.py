"""Rules over the candidate's C++/CUDA sources (tokenized, never regex over raw text).

ATen ops and vendor libraries (cuBLAS, cuDNN) called from C++ are not rules here: their kernels
are seen at run time and judged under the job's policy profile. Neither are streams: whether work on
another stream is joined back before forward returns is read from the kernel trace (KJ-R03).

The same behaviour gets the same rule id in Python and in C++ (spawning a process is KJ404
whether it is subprocess.run or system()), so a job disables a behaviour in one place.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from worker.engine.policy.context import PolicyContext
from worker.engine.policy.cuda_sources import CudaSource
from worker.engine.policy.cuda_tokens import Token, directive_body_tokens, include_target, tokenize
from worker.engine.policy.registry import Finding
from worker.engine.policy.vocab import VERDICT_PATTERN

# Free functions called as name(...): rule id per name.
CALL_RULES: dict[str, str] = {
    **dict.fromkeys(("system", "popen", "_popen", "fork", "vfork", "execl", "execlp", "execle", "execv", "execvp",
                     "execve", "execvpe", "posix_spawn", "posix_spawnp", "setsid", "daemon"), "KJ404-process-spawn"),
    **dict.fromkeys(("fopen", "fopen64", "freopen", "open", "openat", "creat", "remove", "unlink", "rename",
                     "mkdir", "rmdir", "opendir", "readdir", "truncate", "ftruncate", "readlink", "symlink",
                     "chmod", "access", "stat", "lstat", "tmpfile", "mkstemp"), "KJ406-file-access"),
    **dict.fromkeys(("dlopen", "dlsym", "dlmopen", "syscall", "mprotect", "ptrace", "LoadLibrary",
                     "LoadLibraryA", "GetProcAddress", "mmap", "process_vm_readv", "process_vm_writev"),
                    "KJ407-native-code-loading"),
    **dict.fromkeys(("socket", "connect", "gethostbyname", "getaddrinfo", "sendto", "recvfrom", "inet_pton",
                     "curl_easy_init", "curl_easy_perform"), "KJ405-network"),
    **dict.fromkeys(("exit", "_exit", "_Exit", "quick_exit", "abort", "kill", "killpg", "raise", "terminate",
                     "pthread_kill", "cudaDeviceReset", "signal", "sigaction", "alarm"), "KJ403-process-exit"),
    **dict.fromkeys(("pthread_create", "async", "thread", "jthread", "cudaLaunchHostFunc", "cudaStreamAddCallback"),
                    "KJ302-background-thread"),
    **dict.fromkeys(("cudaStreamSetAttribute", "cudaCtxResetPersistingL2Cache", "cuStreamSetAttribute",
                     "cudaGraphKernelNodeSetAttribute"), "KJ304-persisting-l2"),
    **dict.fromkeys(("clock", "clock64", "__nanosleep", "nanosleep", "usleep", "sleep"), "KJ315-device-clock-read"),
    **dict.fromkeys(("__globaltimer", "cudaEventElapsedTime", "gettimeofday", "clock_gettime", "time", "rdtsc",
                     "__rdtsc"), "KJ308-clock-access"),
    **dict.fromkeys(("cudaGraphCreate", "cudaGraphInstantiate", "cudaGraphLaunch", "cudaStreamBeginCapture",
                     "cudaStreamEndCapture", "cudaGraphAddKernelNode", "capture_begin", "replay"), "KJ112-cuda-graph"),
    **dict.fromkeys(("cudaMalloc", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc", "cudaMallocAsync",
                     "cudaMallocPitch", "cudaMalloc3D", "cuMemAlloc", "cuMemAllocManaged", "raw_alloc",
                     "cudaDeviceSetLimit"), "KJ408-raw-gpu-allocation"),
    **dict.fromkeys(("getenv", "secure_getenv"), "KJ306-env-read"),
    **dict.fromkeys(("setenv", "putenv", "unsetenv"), "KJ307-env-write"),
}
# Identifiers that are suspicious wherever they appear (types, constants).
IDENT_RULES: dict[str, str] = {
    **dict.fromkeys(("accessPolicyWindow", "cudaLimitPersistingL2CacheSize", "cudaAccessPropertyPersisting",
                     "cudaStreamAttributeAccessPolicyWindow", "cudaLaunchAttributeAccessPolicyWindow",
                     "cudaKernelNodeAttributeAccessPolicyWindow", "CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW"),
                    "KJ304-persisting-l2"),
    **dict.fromkeys(("ifstream", "ofstream", "fstream", "filebuf", "FILE"), "KJ406-file-access"),
    **dict.fromkeys(("CUDAGraph", "cudaGraph_t", "cudaGraphExec_t"), "KJ112-cuda-graph"),
    **dict.fromkeys(("chrono",), "KJ308-clock-access"),
    **dict.fromkeys(("environ",), "KJ306-env-read"),
}
INCLUDE_RULES: tuple[tuple[str, str], ...] = (
    ("thread", "KJ302-background-thread"), ("future", "KJ302-background-thread"), ("pthread", "KJ302-background-thread"),
    ("sys/socket", "KJ405-network"), ("netinet", "KJ405-network"), ("arpa/inet", "KJ405-network"),
    ("netdb", "KJ405-network"), ("curl", "KJ405-network"), ("dlfcn", "KJ407-native-code-loading"),
    ("sys/mman", "KJ407-native-code-loading"), ("sys/syscall", "KJ407-native-code-loading"),
    ("fstream", "KJ406-file-access"), ("filesystem", "KJ406-file-access"), ("fcntl", "KJ406-file-access"),
    ("unistd", "KJ409-unusual-import"), ("csignal", "KJ403-process-exit"), ("signal.h", "KJ403-process-exit"),
    ("chrono", "KJ308-clock-access"), ("sys/time", "KJ308-clock-access"), ("CUDAGraph", "KJ112-cuda-graph"),
)
# Registration of kernels into a namespace, by its first argument: ATen's (`aten`) or every one (`_`) replaces
# operators the harness calls too, in the candidate's process (the timer's L2 flush is a zero_); a candidate's
# own namespace is its business.
LIBRARY_MACROS = {"TORCH_LIBRARY", "TORCH_LIBRARY_IMPL", "TORCH_LIBRARY_FRAGMENT"}
OVERRIDDEN_NAMESPACES = {"aten", "_"}
# The dispatcher's registration calls, whatever the namespace (TORCH_LIBRARY's macros are the public way).
DISPATCHER_REGISTRATION = {"registerImpl", "registerFallback", "registerDef", "registerLibrary"}
TIMER_REGISTERS = re.compile(r"%(globaltimer|clock|clock64|clock_hi|globaltimer_lo|globaltimer_hi)\b")
# Namespaces under which CALL_RULES names mean the library function (not a user's own namespace).
KNOWN_QUALIFIERS = {None, "", "std", "at", "cuda", "c10", "torch", "detail"}
PRINTERS = {"printf", "fprintf", "puts", "cout", "cerr", "fputs", "std"}


def detect_cuda_rules(ctx: PolicyContext) -> Iterator[Finding]:
    for source in ctx.cuda_sources:
        tokens = tokenize(source.text)
        expanded: list[Token] = []
        for token in tokens:
            expanded.append(token)
            if token.kind == "directive":
                expanded.extend(directive_body_tokens(token))
        yield from _scan(source, expanded)


def _scan(source: CudaSource, tokens: list[Token]) -> Iterator[Finding]:
    lines = source.text.splitlines()

    def finding(rule: str, what: str, token: Token) -> Finding:
        text = lines[token.line].strip() if token.line < len(lines) else token.text
        return Finding(rule, f"{what} (in {source.origin})", line=source.line + token.line, evidence=text[:160])

    for index, token in enumerate(tokens):
        previous = tokens[index - 1] if index else None
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.kind == "directive":
            target = include_target(token)
            if target is not None:
                for needle, rule in INCLUDE_RULES:
                    if needle in target:
                        yield finding(rule, f"includes <{target}>", token)
                        break
            if "##" in token.text and token.text.lstrip("#").strip().startswith("define"):
                yield finding("KJ402-dynamic-code", "pastes identifiers together in a macro", token)
            continue
        if token.kind == "string":
            if token.value == "aten":  # torch::Library(torch::Library::IMPL, "aten", ...)
                yield finding("KJ303-monkeypatch", "names ATen's namespace as a string (a library of its operators)",
                              token)
            if TIMER_REGISTERS.search(token.value):
                yield finding("KJ305-device-timer-asm", "reads a hardware timer register in inline PTX", token)
            if VERDICT_PATTERN.search(token.value) and _printed(tokens, index):
                yield finding("KJ411-verdict-like-output", "prints text that looks like a verdict", token)
            continue
        if token.kind != "ident":
            continue
        is_call = following is not None and following.text == "("
        is_member = previous is not None and previous.text in (".", "->")
        qualifier = _qualifier(tokens, index)
        if token.text in ("thread", "jthread", "async") and qualifier == "std":
            yield finding("KJ302-background-thread", f"uses std::{token.text}", token)
            continue
        if token.text in IDENT_RULES:
            yield finding(IDENT_RULES[token.text], f"uses {token.text}", token)
        if token.text in LIBRARY_MACROS and is_call and index + 2 < len(tokens) \
                and tokens[index + 2].text in OVERRIDDEN_NAMESPACES:
            yield finding("KJ303-monkeypatch", f"registers kernels for ATen's operators ({token.text}("
                                               f"{tokens[index + 2].text}, ...))", token)
        if token.text in DISPATCHER_REGISTRATION and is_call and is_member:
            yield finding("KJ303-monkeypatch", f"registers with the dispatcher ({token.text})", token)
        if is_call and not is_member and token.text in CALL_RULES and qualifier in KNOWN_QUALIFIERS:
            yield finding(CALL_RULES[token.text], f"calls {token.text}()", token)


def _qualifier(tokens: list[Token], index: int) -> str | None:
    """`ns` for `ns::name`, "" for `::name`, None when unqualified."""
    if index >= 1 and tokens[index - 1].text == "::":
        if index >= 2 and tokens[index - 2].kind == "ident":
            return tokens[index - 2].text
        return ""
    return None


def _printed(tokens: list[Token], index: int) -> bool:
    j = index - 1
    while j >= 0 and tokens[j].text not in (";", "{", "}"):
        if tokens[j].kind == "ident" and tokens[j].text in PRINTERS:
            return True
        j -= 1
    return False


def detect_triton_inline_asm(ctx: PolicyContext) -> Iterator[Finding]:
    facts = ctx.facts
    for node in ast.walk(facts.tree):
        if isinstance(node, ast.Call) and (facts.qualname(node.func) or "").endswith("inline_asm_elementwise"):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and TIMER_REGISTERS.search(arg.value):
                    yield ctx.finding("KJ305-device-timer-asm", "reads a hardware timer register in Triton inline asm",
                                      node)


DETECTORS = (detect_cuda_rules, detect_triton_inline_asm)
