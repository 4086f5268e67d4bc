"""The special tokens the formats write and the tokenizer reserves, at fixed ids (their position here).

Ids 0-33 are StarCoder2's sentinels (paper, Table 5), `<|endoftext|>` and the four FIM tokens first as in
StarCoder, so ids 0-4 mean the same in both; then the placeholders the PII stage writes (StarCoder2's
tokenizer also carries NAME, EMAIL, KEY and PASSWORD); then StarCoder's metadata and commit tokens, which
its file-level format uses.
"""

EOD = "<|endoftext|>"
FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD = "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"
REPO_NAME, FILE_SEP = "<repo_name>", "<file_sep>"
JUPYTER_START, JUPYTER_TEXT, JUPYTER_CODE = "<jupyter_start>", "<jupyter_text>", "<jupyter_code>"
JUPYTER_OUTPUT, JUPYTER_SCRIPT, EMPTY_OUTPUT = "<jupyter_output>", "<jupyter_script>", "<empty_output>"
REPONAME, FILENAME, GH_STARS = "<reponame>", "<filename>", "<gh_stars>"
ISSUE_START, ISSUE_COMMENT, ISSUE_CLOSED = "<issue_start>", "<issue_comment>", "<issue_closed>"
COMMIT_BEFORE, COMMIT_MSG, COMMIT_AFTER = "<commit_before>", "<commit_msg>", "<commit_after>"
# StarCoder2's pull requests (its Table 5)
PR, PR_STATUS, PR_IS_MERGED = "<pr>", "<pr_status>", "<pr_is_merged>"
PR_BASE, PR_FILE, PR_BASE_CODE, PR_DIFF, PR_DIFF_HUNK = (
    "<pr_base>",
    "<pr_file>",
    "<pr_base_code>",
    "<pr_diff>",
    "<pr_diff_hunk>",
)
PR_COMMENT, PR_EVENT_ID, PR_REVIEW, PR_REVIEW_STATE = (
    "<pr_comment>",
    "<pr_event_id>",
    "<pr_review>",
    "<pr_review_state>",
)
PR_REVIEW_COMMENT, PR_HUNK_LINE = "<pr_review_comment>", "<pr_diff_hunk_comment_line>"
PR_REPLY_TO_REVIEW, PR_REPLY_TO_COMMENT = "<pr_in_reply_to_review_id>", "<pr_in_reply_to_comment_id>"

SPECIAL_TOKENS = (
    EOD,
    FIM_PREFIX,
    FIM_MIDDLE,
    FIM_SUFFIX,
    FIM_PAD,
    REPO_NAME,
    FILE_SEP,
    ISSUE_START,
    ISSUE_COMMENT,
    ISSUE_CLOSED,
    JUPYTER_START,
    JUPYTER_TEXT,
    JUPYTER_CODE,
    JUPYTER_OUTPUT,
    JUPYTER_SCRIPT,
    EMPTY_OUTPUT,
    "<code_to_intermediate>",
    "<intermediate_to_code>",
    PR,
    PR_STATUS,
    PR_IS_MERGED,
    PR_BASE,
    PR_FILE,
    PR_BASE_CODE,
    PR_DIFF,
    PR_DIFF_HUNK,
    PR_COMMENT,
    PR_EVENT_ID,
    PR_REVIEW,
    PR_REVIEW_STATE,
    PR_REVIEW_COMMENT,
    PR_REPLY_TO_REVIEW,
    PR_REPLY_TO_COMMENT,
    PR_HUNK_LINE,
    "<NAME>",
    "<EMAIL>",
    "<KEY>",
    "<PASSWORD>",
    "<USERNAME>",
    REPONAME,
    FILENAME,
    GH_STARS,
    COMMIT_BEFORE,
    COMMIT_MSG,
    COMMIT_AFTER,
)
