"""The pii stage's recognizers for other ecosystems' idioms (`stackcurate/stages/pii/idioms.py`): each idiom
found as its ecosystem writes it, and the look-alikes met in real Debian packages left alone.

Names, handles and secrets here are made up; the negative cases are shapes taken from real packages'
files (Go and Ruby tests, PostgreSQL's docs, AWS SDK comments, testthat's templates).
"""

import pytest

pytest.importorskip("presidio_analyzer")

import pyarrow as pa  # noqa: E402

from stackcurate.stages.pii import Detector, PiiConfig, PiiStage, is_people_file  # noqa: E402


@pytest.fixture(scope="module")
def detector() -> Detector:
    return Detector(PiiConfig(model="none"))


def found(detector: Detector, text: str, people: bool = False) -> set[tuple[str, str]]:
    """(entity, text) of every span found, recorded-only handles included; `people`: as in an AUTHORS file."""
    spans, _ = detector.find(text, people=people)
    return {(s.entity, text[s.start : s.end]) for s in spans}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            'Authors@R: c(person("Marta", "Quiroga", role = c("aut", "cre"), email = "mquiroga@posteo.de"),\n'
            '    person(given = "Arvid", family = "Lindqvist", role = "ctb"))\n',
            {("NAME", "Marta"), ("NAME", "Quiroga"), ("NAME", "Arvid"), ("NAME", "Lindqvist")},
            id="r-authors-at-r",
        ),
        pytest.param(
            "Author: Marta Quiroga [aut, cre] (<https://orcid.org/0000-0002-1825-0097>),\n  Arvid Lindqvist [ctb],\n"
            "  Oyelaran Bamidele [ctb]\nMaintainer: Marta Quiroga <mquiroga@posteo.de>\n",
            {("NAME", "Marta Quiroga"), ("NAME", "Arvid Lindqvist"), ("NAME", "Oyelaran Bamidele")},
            id="r-description-author",
        ),
        pytest.param(
            "=head1 AUTHOR\n\nTorvald Ekblom\n\n=head1 COPYRIGHT\n", {("NAME", "Torvald Ekblom")}, id="pod-author"
        ),
        pytest.param(
            "=head1 AUTHOR\n\nTorvald Ekblom E<lt>tekblom@riseup.netE<gt>\n",
            {("NAME", "Torvald Ekblom"), ("EMAIL", "tekblom@riseup.net")},
            id="pod-e-lt",
        ),
        pytest.param(
            "Sunniva Haugland, C<sunniva@haugland.no>\n", {("NAME", "Sunniva Haugland")}, id="pod-code-wrapper"
        ),
        pytest.param(
            "Kenji Wataname, E<lt>kwataname[at]cpan.orgE<gt>\n",
            {("NAME", "Kenji Wataname"), ("EMAIL", "kwataname[at]cpan.org")},
            id="pod-obfuscated",
        ),
        pytest.param(
            "Questions go to tekblom at riseup dot net, please.\n",
            {("EMAIL", "tekblom at riseup dot net")},
            id="spelled-out-address",
        ),
        pytest.param(
            "    <developer>\n      <id>qlindqvist</id>\n      <name>Arvid Lindqvist</name>\n    </developer>\n",
            {("NAME", "Arvid Lindqvist")},
            id="maven-developer",
        ),
        pytest.param(
            '    developers {\n        developer {\n            id = "qlindqvist"\n'
            '            name = "Arvid Lindqvist"\n        }\n    }\n',
            {("NAME", "Arvid Lindqvist")},
            id="gradle-developer",
        ),
        pytest.param(
            ' * @author <a href="mailto:arvid@lindqvist.se">Arvid Lindqvist</a>\n',
            {("NAME", "Arvid Lindqvist"), ("EMAIL", "arvid@lindqvist.se")},
            id="javadoc-mailto",
        ),
        pytest.param(
            " <lead>\n  <name>Sunniva Haugland</name>\n  <user>shaugland</user>\n </lead>\n",
            {("NAME", "Sunniva Haugland")},
            id="pear-lead",
        ),
        pytest.param(
            "libfoo (1.2-1) unstable; urgency=medium\n\n  [ Torvald Ekblom ]\n  * New upstream release.\n",
            {("NAME", "Torvald Ekblom")},
            id="debian-changelog-section",
        ),
    ],
)
def test_people_in_other_ecosystems_manifests_and_docs(detector, text, expected):
    assert expected <= found(detector, text)


@pytest.mark.parametrize(
    ("text", "handle"),
    [
        ("    <developer>\n      <id>qlindqvist</id>\n      <name>Arvid Lindqvist</name>\n", "qlindqvist"),
        ('        developer {\n            id = "qlindqvist"\n', "qlindqvist"),
        ("        developer {\n            id 'qlindqvist'\n", "qlindqvist"),
        (" <lead>\n  <name>Sunniva Haugland</name>\n  <user>shaugland</user>\n", "shaugland"),
        ("* Merge pull request #123 from shaugland/fix-parser\n", "shaugland"),
        ("Sunniva Haugland <sunniva@haugland.no> (@shaugland)\n", "shaugland"),
        ("cd /home/tekblom/projects/app\n", "tekblom"),
        (r"C:\Users\tekblom\Documents\db.accdb", "tekblom"),
    ],
)
def test_handles_where_manifests_and_paths_name_them(detector, text, handle):
    assert ("USERNAME", handle) in found(detector, text)


SECRET = "Hq7#pLm2x"


@pytest.mark.parametrize(
    "template",
    [
        'p.setCredentials(AuthScope.ANY, new UsernamePasswordCredentials("deploy", "{s}"));',
        'return new PasswordAuthentication("mailer", "{s}".toCharArray());',
        'headers.setBasicAuth("svc-report", "{s}");',
        'String credential = Credentials.basic("jroe", "{s}");',
        "Net::SMTP->new('smtp.isp.net')->auth('jroe', '{s}');",
        'Connection c = DriverManager.getConnection("jdbc:postgresql://db/app", "app", "{s}");',
        'my $dbh = DBI->connect($dsn, "report", "{s}", {{ RaiseError => 1 }});',
        '$link = mysqli_connect("localhost", "app", "{s}", "shop");',
        "$pdo = new PDO('mysql:host=localhost;dbname=shop', 'app', '{s}');",
        "curl -u deploy:{s} https://ci.internal.net/api",
        "mysqldump -u backup -p{s} mydb > dump.sql",
        "sshpass -p '{s}' ssh deploy@host",
        "redis-cli -h 198.51.100.3 -a {s} ping",
        "lftp -u backup,{s} sftp://files.internal",
        "smbclient //fs/share -U backup%{s}",
        "PGPASSWORD='{s}' psql -h 203.0.113.9 -U report",
        '<property name="password" value="{s}"/>',
        "<password>{s}</password>",
        '<entry key="db.password">{s}</entry>',
        'poll mail.isp.net protocol imap user "jroe" password "{s}"',
        "machine ftp.isp.net login jroe password {s}",
        "Net::HTTP::Get.new(uri).basic_auth 'jroe', '{s}'",
        '$db = new mysqli("localhost", "app", "{s}", "shop");',
        "mysqldump -uroot -p'{s}' --all-databases",
        "mysqladmin -u root password '{s}'",
        "mongo -u admin -p {s} --authenticationDatabase admin",
        "htpasswd -b -c /etc/nginx/.htpasswd admin {s}",
        "rabbitmqctl add_user deploy {s}",
        'echo "deploy:{s}" | chpasswd',
        "<param-name>db.password</param-name>\n  <param-value>{s}</param-value>",
        "CREATE USER 'app'@'localhost' IDENTIFIED BY '{s}';",
        "CREATE ROLE report WITH LOGIN ENCRYPTED PASSWORD '{s}';",
        "requirepass {s}",
        "credentials {{\n    username 'deployer'\n    password '{s}'\n}}",
        'db, err := sql.Open("mysql", "app:{s}@tcp(127.0.0.1:3306)/shop")',
        'String url = "jdbc:oracle:thin:scott/{s}@db.internal:1521:orcl";',
        'private static final String dbPassword = "{s}";',
        "const adminPass = '{s}';",
        'self.smtpPassword = "{s}"',
        'String auth = "deploy:{s}";',
        "headers: {{ Authorization: 'Basic ' + Buffer.from(`deploy:{s}`).toString('base64') }}",
        "const url = `https://deploy:{s}@${{host}}/api`;",
        "mail.smtp.auth.password {s}",
        "ENV MYSQL_PASSWORD {s}",
        'ldapsearch -x -D "cn=admin,dc=x,dc=org" -w {s} -b dc=x',
        "docker login -u deploy -p {s} registry.internal",
        "snmpwalk -v3 -u admin -l authPriv -a SHA -A {s} host",
        "openssl pkcs12 -export -passout pass:{s} -out x.p12",
        "keytool -genkey -alias x -storepass {s}",
        # arguments on lines of their own, and credentials after a user further on
        'Connection c = DriverManager.getConnection(\n    "jdbc:mysql://db/app",\n    "app",\n    "{s}");',
        'HttpAuthenticationFeature.basic(\n        "admin",\n        "{s}");',
        'auth = (\n    "admin",\n    "{s}",\n)',
        "<password>\n    {s}\n</password>",
        'auth := smtp.PlainAuth("", "jroe@mail.internal", "{s}", "smtp.internal")',
        "ftp = FTP('ftp.internal', 'jroe', '{s}')",
        "ldap_bind($ds, 'cn=admin,dc=x', '{s}');",
        'client.Credentials = new NetworkCredential("jroe", "{s}");',
        "$ua->credentials('x.org:80', 'realm', 'jroe', '{s}');",
        'curl_setopt($ch, CURLOPT_USERPWD, "jroe:{s}");',
        'env.put(Context.SECURITY_CREDENTIALS, "{s}");',
        'String[] creds = {{"jroe", "{s}"}};',
        "ssh2_auth_password($conn, 'jroe', '{s}');",
        "$req->authorization_basic('jroe', '{s}');",
        "Faraday.new(url) {{ |f| f.request :basic_auth, 'jroe', '{s}' }}",
        "open(url, http_basic_authentication: ['jroe', '{s}'])",
        '<set-property property="password" value="{s}"/>',
        "<property>\n  <name>javax.jdo.option.ConnectionPassword</name>\n  <value>{s}</value>\n</property>",
    ],
)
def test_passwords_handed_to_auth_and_connect_calls_command_lines_and_configs(detector, template):
    text = template.format(s=SECRET) + "\n"
    assert ("PASSWORD", SECRET) in found(detector, text), text


@pytest.mark.parametrize(
    "secret",
    ["$9ZNsEC(VC", "@37BaToox2OZIKq1", "%NCDm)(O#Cc+dTlz&624", "x&6nBir4", "Xk9mP2q7Lw4Zr8Tn3Vb6Yc", "k=9mP2q7Lw"],
)
@pytest.mark.parametrize(
    "template",
    [
        "spring.datasource.password={s}",
        "export DB_PASS={s}",
        'var cs = "Server=db;Database=app;User Id=sa;Password={s};";',
        'headers.setBasicAuth("admin", "{s}");',
        "<password>{s}</password>",
        "curl -u admin:{s} https://ci.internal.net/api",
    ],
)
def test_passwords_of_every_shape_a_generator_makes(detector, template, secret):
    """Symbols where a reference would open (`$`, `@`, `%`), `&`, `=`, twenty random characters: still passwords."""
    text = template.format(s=secret) + "\n"
    assert ("PASSWORD", secret) in found(detector, text), text


def test_a_url_query_and_references_end_or_void_the_value(detector):
    got = found(detector, "jdbc:mysql://db/app?user=app&password=Hq7#pLm2x&useSSL=true\n")
    assert ("PASSWORD", "Hq7#pLm2x") in got
    for text in ("password=$(cat /run/secrets/db)", "DB_PASSWORD=%DB_PASSWORD%", "spring.datasource.password=${DB}"):
        assert not any(entity == "PASSWORD" for entity, _ in found(detector, text + "\n")), text


def test_azure_account_keys_and_session_cookies(detector):
    key = "q3X7vB2nR8mK4pL9wZ1tY6uH5jG0fD3sA8eC2xV7bN4mQ1kP9oI6uY3tR5eW2qA0sD8fG7hJ4kL1zX6cV9bN3m=="
    text = f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={key};EndpointSuffix=core.windows.net\n"
    assert ("KEY", key) in found(detector, text)
    cookie = "Zx9KqP2mW8vR4tL6nB3yH7cJ5dF1gS0a"
    assert ("KEY", cookie) in found(detector, f"Cookie: sessionid={cookie}\n")
    assert ("KEY", cookie) in found(detector, f's.cookies.set("PHPSESSID", "{cookie}")\n')
    assert ("KEY", cookie) in found(detector, f'cookies = {{"session": "{cookie}"}}\n')


@pytest.mark.parametrize(
    "template",
    [
        "aws_secret_access_key = {k}",
        's3 = boto3.client("s3", aws_secret_access_key="{k}")',
        "    AWS_SECRET_ACCESS_KEY: {k}",
        'cred, err := azblob.NewSharedKeyCredential("acme", "{k}")',
        'creds := credentials.NewStaticV4("Q3EGRVX5HNVLG7OZ", "{k}", "")',
        "az storage blob upload --account-name acme --account-key {k} -f x",
        "export AZURE_STORAGE_KEY={k}",
    ],
)
def test_cloud_storage_keys_in_files_calls_and_command_lines(detector, template):
    key = "hT3k9Lq/Zp0vXw+7RbN2mCj4YsUeA1dF8gKiOoPz"
    assert ("KEY", key) in found(detector, template.format(k=key) + "\n")


@pytest.mark.parametrize(
    "text",
    [
        # calls that are not logins or connections (Go and Ruby tests, PostgreSQL's docs)
        '\terr = c.AuthUserAdd("user2", "user2", false)',
        '\terr := client.NetworkConnect(context.Background(), "network_id", "container_id", nil)',
        "SELECT * FROM connectby('connectby_tree', 'keyid', 'parent_keyid', 'row2', 0)",
        '\t_, err := client.Authorize(context.Background(), "example.com")',
        # a variable, a prompt, a sed script
        'mysql -u root -p"$DB_PASS" shop',
        "redis-cli -a $REDIS_PASSWORD ping",
        "#PassCmd \"sed -n -e 's,^machine host login tehuser password \\\\(.*\\\\),\\\\1,p' < ~/.netrc\"",
        "By default, when using password authentication, the module expects the",
        "<password>${db.password}</password>",
        # SQL, config directives and DSNs with variables or placeholders
        "CREATE USER 'app'@'localhost' IDENTIFIED BY 'password';",
        "GRANT ALL ON db.* TO :user IDENTIFIED BY :pass;",
        "requirepass foobared",
        "    password project.findProperty('repoPassword')",
        'db, err := sql.Open("mysql", "user:password@tcp(localhost:3306)/db")',
        "cred, err := azblob.NewSharedKeyCredential(accountName, accountKey)",
        "htpasswd -b passwords.txt user $PASS",
        "    bypass = 'lookup-cache'",
        "password required",
        "ENV MYSQL_PASSWORD $DB_PASS",
        "docker login -u deploy -p $TOKEN registry.internal",
        "openssl rsa -in key.pem -passin env:KEY_PASS",
        "      AUTHORIZATION_KEYS = ['HTTP_AUTHORIZATION', 'X-HTTP_AUTHORIZATION']",
        '    "rest_framework.authentication.TokenAuthentication",',
        # templates and prose
        'usethis::use_description(list(`Authors@R` = \'person("First", "Last", email = "first.last@example.com")\'))',
        "We looked at the result dot by dot.",
    ],
)
def test_look_alikes_from_real_packages_are_left(detector, text):
    assert found(detector, text + "\n") == set(), text


@pytest.mark.parametrize(
    ("text", "handle"),
    [
        ("// Internet Control Message Protocol (ICMP) Parameters, Updated: 2018-02-26", "ICMP"),
        ("\t// Resource Names (ARNs) and AWS Service Namespaces", "ARNs"),
        ('    ("/./home//..//home/user2/", ["home/user2/.profile"]),', "user2"),
        ("            sample: /home/foobar/21102015-1445431274-908472971", "foobar"),
        ("ENV HOME=/home/runner/work", "runner"),
    ],
)
def test_acronyms_and_shared_accounts_are_no_handles(detector, text, handle):
    assert ("USERNAME", handle) not in found(detector, text + "\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "pom.withXml {\n  def dev = asNode().appendNode('developers').appendNode('developer')\n"
            "  dev.appendNode('id', 'qlindqvist')\n  dev.appendNode('name', 'Arvid Lindqvist')\n}\n",
            {("NAME", "Arvid Lindqvist"), ("USERNAME", "qlindqvist")},
            id="gradle-append-node",
        ),
        pytest.param(
            "POM_DEVELOPER_ID=qlindqvist\nPOM_DEVELOPER_NAME=Arvid Lindqvist\n",
            {("NAME", "Arvid Lindqvist"), ("USERNAME", "qlindqvist")},
            id="gradle-properties",
        ),
        pytest.param(
            'String auth = Base64.getEncoder().encodeToString("deploy:Hq7#pLm2x".getBytes());\n',
            {("PASSWORD", "Hq7#pLm2x")},
            id="base64-basic-auth",
        ),
        pytest.param(
            "mc alias set backup https://s3.internal --access-key Q3EGRVX5HNVLG7OZ --secret-key "
            "Zx9KqP2mW8vR4tL6nB3yH7cJ5dF1gS0aKe\n",
            {("KEY", "Zx9KqP2mW8vR4tL6nB3yH7cJ5dF1gS0aKe")},
            id="cli-secret-key",
        ),
        pytest.param("Sunniva Haugland (SHAUGLAND)\n", {("USERNAME", "SHAUGLAND")}, id="cpan-id"),
    ],
)
def test_gradle_publishing_encoded_credentials_and_cli_keys(detector, text, expected):
    assert expected <= found(detector, text)


PEOPLE_FILE = """\
Please do not mail any of the authors listed here asking questions.

Original Authors
----------------
Torvald Ekblom      <tekblom@riseup.net>
Sunniva Haugland	   sunniva at haugland.no
Arvid Lindqvist -- trac handler, man pages
Oyelaran Bamidele: the Windows port
qlindqvist -- rub handler
- Marta Quiroga
Kenji Wataname (@kwataname)

IME input method
----------------
Heikki Vatanen
"""


def test_a_file_that_lists_people_names_them_whatever_follows_each(detector):
    assert is_people_file("usr/share/doc/x/AUTHORS") and is_people_file("THANKS.md") and is_people_file("MAINTAINERS")
    assert is_people_file("usr/share/doc/x/THANKS.gz") and is_people_file("CREDITS-2.x")
    assert not is_people_file("src/authors.py") and not is_people_file("README.md")
    got = found(detector, PEOPLE_FILE, people=True)
    names = ["Torvald Ekblom", "Sunniva Haugland", "Arvid Lindqvist", "Oyelaran Bamidele", "Marta Quiroga",
             "Kenji Wataname", "Heikki Vatanen"]  # fmt: skip
    assert {("NAME", name) for name in names} <= got
    assert {("USERNAME", "qlindqvist"), ("USERNAME", "kwataname")} <= got
    assert not any("Original" in value or "Please" in value or "IME" in value for _, value in got)
    # the same text as code: no list of people, so no bare lines taken for names
    plain = {value for _, value in found(detector, PEOPLE_FILE)}
    assert "Heikki Vatanen" not in plain and "Arvid Lindqvist" not in plain


def test_the_stage_reads_a_people_file_by_its_path():
    stage = PiiStage(PiiConfig(model="none"))
    table = pa.table({"path": ["pkg/AUTHORS", "pkg/notes.txt"], "content": [PEOPLE_FILE, PEOPLE_FILE]})
    spans = stage(table).kept.column("pii_spans").to_pylist()
    names = [{PEOPLE_FILE[s["start"] : s["end"]] for s in row if s["entity"] == "NAME"} for row in spans]
    assert "Heikki Vatanen" in names[0] and "Heikki Vatanen" not in names[1]


def test_maintainers_files_in_their_three_layouts(detector):
    text = (
        "Sunniva Haugland <sunniva@haugland.no> (@shaugland)\n"
        "maintainers:\n- kwataname\n- qLindqvist\n"
        '[people]\n\n\t[people.tekblom]\n\tName = "Torvald Ekblom"\n\tEmail = "tekblom@riseup.net"\n'
        '\tGitHub = "TEkblom"\n'
    )
    got = found(detector, text, people=True)
    handles = {"shaugland", "kwataname", "qLindqvist", "tekblom", "TEkblom"}
    assert {("USERNAME", h) for h in handles} | {("NAME", "Torvald Ekblom"), ("NAME", "Sunniva Haugland")} <= got
    assert not any(value in ("maintainers", "people") for _, value in got)


def test_changelog_credits_php_news_rails_and_trailers(detector):
    text = (
        ". Fixed bug GH-9066 (signed integer overflow). (zeriyoshi)\n"
        ". Fix memory leak in tidy_repair_file(). (nielsdos, kwataname)\n"
        ". Fixed a crash (CVE-2026-6472)\n"
        "* Add build-indep targets (empty). (again)\n"
        "    Fix the thing.\n\n    *Torvald Ekblom*\n"
        "Assisted-by: Sunniva Haugland\n"
        "- fixed: bug spotted by Arvid Lindqvist: allowed\n"
    )
    spans, _ = detector.find(text)
    got = {(s.entity, text[s.start : s.end]) for s in spans}
    assert {("USERNAME", "zeriyoshi"), ("USERNAME", "nielsdos"), ("USERNAME", "kwataname")} <= got
    assert {("NAME", "Torvald Ekblom"), ("NAME", "Sunniva Haugland"), ("NAME", "Arvid Lindqvist")} <= got
    assert not any(value in ("CVE-2026-6472", "again", "empty") for _, value in got)


@pytest.mark.parametrize(
    "text",
    [
        "// JSON Web Key Set (JWKS) endpoint.",
        "// specified in Classless Inter-Domain Routing (CIDR) notation.",
        "\t// the Wavelength Zone (available).",
        "\tCopyTo func(context.Context, io.Writer) (int64, error)",
        "\t// The name of the channel. (user-mutable)",
        "    become_pass=('ansible_become_password', 'ansible_become_pass'),",
        "x.setPassword(password);",
        'props.setProperty("password", System.getenv("P"));',
        "we look at this.",
    ],
)
def test_acronyms_return_types_and_names_of_settings_are_left(detector, text):
    assert found(detector, text + "\n") == set()


@pytest.mark.parametrize(
    "template",
    [
        'ds.setPassword("{s}");',
        'config.setJdbcPassword("{s}");',
        'props.setProperty("mail.smtp.password", "{s}");',
        '.withPassword("{s}")',
        'ftp.connect("ftp.x.org", 21, "jroe", "{s}")',
        'String enc = Base64.getEncoder().encodeToString(("admin" + ":" + "{s}").getBytes());',
        'users.put("admin", new Password("{s}"));',
        'store.addUser("admin", Credential.getCredential("{s}"), roles);',
    ],
)
def test_passwords_given_to_setters_builders_and_keyed_calls(detector, template):
    text = template.format(s=SECRET) + "\n"
    assert ("PASSWORD", SECRET) in found(detector, text)


def test_spelled_addresses_in_brackets_and_in_people_files(detector):
    text = "Aaron Hopkins <go-sql-driver at die.net>\n"
    assert ("EMAIL", "go-sql-driver at die.net") in found(detector, text)
    listed = "Adam Mitchell\t\t   adam at cafe21.org\n"
    assert ("EMAIL", "adam at cafe21.org") in found(detector, listed, people=True)


def test_person_records_pod_addresses_and_credits_from(detector):
    text = (
        "ext.developers = [[id: 'qlindqvist', name: 'Arvid Lindqvist', email: 'arvid@lindqvist.se']]\n"
        "=head1 AUTHOR\n\nTorvald Ekblom, tekblom@riseup.net\nSunniva Haugland C<< <sunniva@haugland.no> >>\n"
        ". Fixed bug GH-1 (crash). (Kenji Wataname, zeriyoshi)\n"
        "  * Patch from Marta Quiroga.\n"
        'option(name = "Oyelaran Bamidele")\n'  # a name key with no email beside it: not a record of a person
    )
    got = found(detector, text)
    names = {"Arvid Lindqvist", "Torvald Ekblom", "Sunniva Haugland", "Kenji Wataname", "Marta Quiroga"}
    assert {("NAME", name) for name in names} <= got
    assert ("USERNAME", "zeriyoshi") in got and ("NAME", "Oyelaran Bamidele") not in got


def test_pod_author_lists_cpan_ids_and_changelog_closing_names(detector):
    text = (
        "=head1 AUTHORS\n\n=over 4\n\n=item Torvald Ekblom <tekblom at riseup dot net>\n\n"
        "=item * Sunniva Haugland L<https://metacpan.org/author/SHAUGLAND>\n\n=back\n\n"
        "  - fix the parser (Arvid Lindqvist)\n"
        "  - fix the lexer (RT #1234, Kenji Wataname)\n"
        "  - fix the engine (Thanks Marta Quiroga)\n"
        "  - thanks to kwataname for the report\n"
        "  + add usage message (Debian #371855).\n"
        "  - thanks guys! Patches from upstream PR#20603, fixed by libgcrypt 1.9.4, enabled by default\n"
    )
    got = found(detector, text)
    names = {"Torvald Ekblom", "Sunniva Haugland", "Arvid Lindqvist", "Kenji Wataname", "Marta Quiroga"}
    assert {("NAME", name) for name in names} <= got
    assert {("EMAIL", "tekblom at riseup dot net"), ("USERNAME", "SHAUGLAND"), ("USERNAME", "kwataname")} <= got
    handles = {value for entity, value in got if entity == "USERNAME"}
    assert not handles & {"Debian", "guys", "upstream", "libgcrypt", "default"}


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ('<a id="id-1.6.14.2" class="indexterm"></a> on the standby host', None),  # DocBook's anchors
        ("libfoo (1.0.24.2-5) unstable; host builds fixed", None),  # a Debian revision
        ("server package 1.2.3.4+dfsg1", None),
        ('[assembly: AssemblyFileVersion("4.6.57.2")]', None),  # a camelCase version's name
        ("allow hosts 10.0.0.1-93.184.216.34", "93.184.216.34"),  # a range's dash is not a revision
        ("connect to 93.184.216.34 now", "93.184.216.34"),
    ],
)
def test_dotted_versions_and_anchors_are_not_addresses(detector, text, address):
    assert {value for entity, value in found(detector, text) if entity == "IP_ADDRESS"} == ({address} - {None})


def test_a_placeholder_author_is_not_a_name(detector):
    text = "Authors:\n    A. Name\n"  # docutils' template of a bibliographic field list
    assert ("NAME", "A. Name") not in found(detector, text)


@pytest.mark.parametrize(
    ("text", "handle"),
    [
        (" * @author kwataname", "kwataname"),
        ("# Copyright (c) 2019-2021 kwataname <kw@mail.internal>", "kwataname"),
        ("Author: qlindqvist", "qlindqvist"),
        ("- Fix the parser (patch by zeriyoshi).", "zeriyoshi"),
        ("Packaged: 2023-01-04 10:12:31 UTC; shaugland", "shaugland"),
        ("s.authors = ['kwataname']", "kwataname"),
    ],
)
def test_a_handle_where_a_name_goes(detector, text, handle):
    assert ("USERNAME", handle) in found(detector, text + "\n")


@pytest.mark.parametrize(
    "text",
    [
        "  regarding copyright ownership.  The ASF licenses this file",  # Apache's header: no year, no holder
        "* `complete()` preserves grouping created by dplyr (#168).",
        '\t\tAuthor:  "author",',
        " * @author unknown",
        "Packaged: 2023-01-04 10:12:31 UTC; root",
        "- Update the docs. [skip ci]",
    ],
)
def test_words_in_a_name_slot_are_no_handles(detector, text):
    assert not any(entity == "USERNAME" for entity, _ in found(detector, text + "\n")), text


def test_people_files_handles_in_tables_codeowners_and_after_addresses(detector):
    assert is_people_file("CODEOWNERS") and is_people_file(".github/CODEOWNERS")
    text = (
        "| Sunniva Haugland | @shaugland | Acme |\n"
        "* @kwataname\n/docs/ @acme/docs-team @qlindqvist\n"
        "Torvald Ekblom <tekblom@riseup.net> [tekblom]\n"
        "Marta Quiroga <mq@mail.internal> github: mquiroga\n"
        "hvatanen: Heikki Vatanen\n"
    )
    got = found(detector, text, people=True)
    handles = {"shaugland", "kwataname", "qlindqvist", "tekblom", "mquiroga", "hvatanen"}
    assert {("USERNAME", h) for h in handles} <= got
    assert ("USERNAME", "acme") not in got


def test_a_closing_credit_in_brackets(detector):
    assert ("USERNAME", "kwataname") in found(detector, "- Fix the lexer. [kwataname]\n")


def test_config_password_keys_that_name_a_file_and_pw_suffixes(detector):
    text = "mysqli.default_pw = Hq7#pLm2x\npassword_file: secrets/db.txt\n"
    spans, _ = detector.find(text, config=True)
    assert [(s.entity, text[s.start : s.end]) for s in spans] == [("PASSWORD", "Hq7#pLm2x")]


def test_where_only_position_says_name_english_words_are_no_name(detector):
    assert not any(e == "NAME" for e, _ in found(detector, '    """ Sample Enum for testing duplicate keys"""\n'))
    assert not any(e == "NAME" for e, _ in found(detector, "Author:\n\nDocument Title\n"))
    assert ("NAME", "Guido van Rossum") in found(detector, "Author:\n\nGuido van Rossum\n")
    assert ("NAME", "Brett Cannon") in found(detector, "Brett Cannon for the patch.\n")


def test_maven_changes_credit_the_committer_and_the_contributor(detector):
    text = (
        '<action dev="tgrabowski" type="fix" due-to="Ilse Vandamme" issue="VFS-123">Fix a leak.</action>\n'
        '<action issue="VFS-124" dev="okarlsen" type="update" due-to="mbrzezin">Update deps.</action>\n'
        '<action dev="tgrabowski" type="add">Add X.</action>\n'
    )
    assert found(detector, text) == {
        ("USERNAME", "tgrabowski"), ("NAME", "Ilse Vandamme"), ("USERNAME", "okarlsen"), ("USERNAME", "mbrzezin"),
    }  # fmt: skip
    assert found(detector, '<action dev="default" type="fix">x</action>\n') == set()  # a word, no handle


def _history(detector: Detector, text: str) -> set[tuple[str, str]]:
    spans, _ = detector.find(text, history=True)
    return {(s.entity, text[s.start : s.end]) for s in spans}


def test_a_changelog_whose_entries_close_with_credit_credits_its_bare_handles(detector):
    text = (
        "## 1.2.0\n"
        "- `Rule#curry` interface (qvorlund)\n"
        "- Add `:case?` predicate (@tmaszk)\n"
        "- Fix a leak (GH#12) [Ilse Vandamme]\n"
        "- Fix spelling (#86, #96) [hjortvik,pdzur]\n"
        "- Support Ruby 3 (experimental)\n"
        "- Docs (speling, etc)\n"
        "[@tmaszk]: https://github.com/tmaszk\n"
    )
    handles = {value for entity, value in _history(detector, text) if entity == "USERNAME"}
    assert handles == {"qvorlund", "tmaszk", "hjortvik", "pdzur"}  # not a word of the vocabulary, not a list


def test_a_changelog_without_credits_in_that_place_keeps_its_closing_words(detector):
    text = "- add a quantizer (bilinear)\n- fix the pmda (pcpqa)\n- faster hashing (normcnst)\n"
    assert _history(detector, text) == set()
    assert found(detector, "- Fix x (qvorlund)\n- Fix y (@tmaszk)\n- Fix z [Ilse Vandamme]\n") == {
        ("USERNAME", "tmaszk")
    }  # the convention is a changelog's: other files keep their closing words


def test_a_pull_request_credits_its_author(detector):
    assert found(detector, "Add support for X. Based on a pull request by qvorlund. (tmaszk)\n") >= {
        ("USERNAME", "qvorlund")
    }


def test_gradle_contributors_and_the_account_that_built_a_jar(detector):
    text = "contributors {\n  contributor {\n    name 'Ilse Vandamme'\n  }\n}\n"
    assert found(detector, text) == {("NAME", "Ilse Vandamme")}
    assert found(detector, "attributes 'Built-By': 'qvorlund', 'Created-By': 'Gradle'\n") == {("USERNAME", "qvorlund")}
    assert found(detector, "Manifest-Version: 1.0\nBuilt-By: qvorlund\n") == {("USERNAME", "qvorlund")}
    assert found(detector, "Built-By: jenkins\n") == set()  # a CI's shared account


def test_an_email_element_holds_an_address_however_spelled_and_profile_urls_hold_handles(detector):
    text = (
        "<developer>\n  <email>qvorlund at apache.org</email>\n  <email>tmaszk -at- posteo dot de</email>\n"
        "  <url>http://people.apache.org/~qvorlund</url>\n  <url>https://twitter.com/tmaszk</url>\n</developer>\n"
    )
    assert found(detector, text) == {
        ("EMAIL", "qvorlund at apache.org"), ("EMAIL", "tmaszk -at- posteo dot de"),
        ("USERNAME", "qvorlund"), ("USERNAME", "tmaszk"),
    }  # fmt: skip
    assert found(detector, "see https://twitter.com/hashtag/python and https://x.com/intent/tweet?text=hi\n") == set()


def test_docker_maintainers_teams_and_markdown_tables_of_people(detector):
    text = (
        '[Org]\n  [Org."Core maintainers"]\n    people = [\n      "qvorlund",\n      "tmaszk",\n    ]\n\n'
        '[people.qvorlund]\n  Name = "Ilse Vandamme"\n  note = "bob"\n'
    )
    assert found(detector, text, people=True) == {
        ("USERNAME", "qvorlund"), ("USERNAME", "tmaszk"), ("NAME", "Ilse Vandamme"),
    }  # fmt: skip
    table = "| Name | GitHub |\n|---|---|\n| Ilse Vandamme | [@qvorlund](https://github.com/qvorlund) |\n"
    assert ("NAME", "Ilse Vandamme") in found(detector, table, people=True)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Aws::Credentials.new('AKIAQWERTYUIOPASDFGH', 'Zx9cVb8Nm7Lk6Jh5Gf4Ds3Aq2We1Rt0YuIoPlMnB')\n",
         "Zx9cVb8Nm7Lk6Jh5Gf4Ds3Aq2We1Rt0YuIoPlMnB"),
        ('c, _ := minio.New(host, "Q7BM3UQ867SPQQA43P2F", "zuf+tfteSlswRu7BJ86wekitnifILbZam1KYY3TG", true)\n',
         "zuf+tfteSlswRu7BJ86wekitnifILbZam1KYY3TG"),
        ('blob = BlobServiceClient(account_url=url, credential="c2VjcmV0a2V5Zm9yYXp1cmVibG9ic3RvcmFnZQ==")\n',
         "c2VjcmV0a2V5Zm9yYXp1cmVibG9ic3RvcmFnZQ=="),
        ("cookies['_myapp_session'] = 'BAh7B0kiD3Nlc3Npb25faWQGOgZFVEkiJTk4'\n",
         "BAh7B0kiD3Nlc3Npb25faWQGOgZFVEkiJTk4"),
        ('req.AddCookie(&http.Cookie{Name: "session_token", Value: "q8v3k2m9n7b5x1z4c6l0p2w8Zx9c"})\n',
         "q8v3k2m9n7b5x1z4c6l0p2w8Zx9c"),
        ("# Netscape HTTP Cookie File\n.corp.net\tTRUE\t/\tFALSE\t0\tsessionid\tq8v3k2m9n7b5x1z4c6l0p2w8\n",
         "q8v3k2m9n7b5x1z4c6l0p2w8"),
        ("Cookie: PHPSESSID=9d2a7c1f3b8e4d6a0c5f2e7b1a9d3c8f; path=/\n", "9d2a7c1f3b8e4d6a0c5f2e7b1a9d3c8f"),
        ("-H 'cookie: laravel_session=eyJpdiI6Ik1UQXlNek0wTlRZM09EazAiLCJ2YWx1ZSI6IiJ9'\n",
         "eyJpdiI6Ik1UQXlNek0wTlRZM09EazAiLCJ2YWx1ZSI6IiJ9"),
    ],
)  # fmt: skip
def test_cloud_keys_after_their_id_and_session_cookies_as_clients_set_them(detector, text, value):
    assert ("KEY", value) in found(detector, text)


def test_ruby_smtp_start_takes_the_password_fifth(detector):
    text = "Net::SMTP.start('smtp.corp.net', 25, 'corp.net', 'mailer', 'Wq2eRt4Yu', :plain)\n"
    assert ("PASSWORD", "Wq2eRt4Yu") in found(detector, text)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("Send bug reports to qvorlund at posteo.de.\n", "qvorlund at posteo.de"),
        ("Author: Ilse Vandamme <ivandamme _at_ posteo.de>\n", "ivandamme _at_ posteo.de"),
        ("contact: qvorlund -at- posteo -dot- de\n", "qvorlund -at- posteo -dot- de"),
        ("mail qvorlund /at/ posteo /dot/ de\n", "qvorlund /at/ posteo /dot/ de"),
        ("jhunter_AT_jdom_DOT_org\n", "jhunter_AT_jdom_DOT_org"),
    ],
)
def test_an_at_spelled_out_between_a_mailbox_and_a_domain(detector, text, address):
    assert ("EMAIL", address) in found(detector, text)


def test_prose_with_an_at_is_no_address(detector):
    assert found(detector, "Have a look at github.com for more, or at docs.python.org.\n") == set()
    assert found(detector, "the file is at setup.cfg and me at example.org\n") == set()


def test_a_ci_jobs_name_in_closing_brackets_is_no_person(detector):
    assert found(detector, "   :alt: GitHub Actions build status (Test Windows)\n") == set()
    assert found(detector, "  * Some handy editing functions (Ilse Vandamme).\n") == {("NAME", "Ilse Vandamme")}


@pytest.mark.parametrize(
    ("path", "text", "value"),
    [
        ("Dockerfile", "ENV REDIS_PASS Mn6bVc4Xz\n", "Mn6bVc4Xz"),
        ("httpd.conf", 'SetEnv DB_PASS "Cx2zAq5Sw"\n', "Cx2zAq5Sw"),
        ("site.conf", "fastcgi_param DB_PASSWORD Vf4bGt6Yh;\n", "Vf4bGt6Yh"),
        ("env.fish", "set -x PGPASSWORD Gb5nHm7Jk\n", "Gb5nHm7Jk"),
        ("deploy.yaml", 'env:\n- name: DB_PASSWORD\n  value: "Ki9oLp3Ju"\n', "Ki9oLp3Ju"),
        ("db.js", 'const pw = process.env.DB_PASSWORD || "Rf5tGy7Hu"\n', "Rf5tGy7Hu"),
        ("db.R", 'Sys.setenv(PGPASSWORD = "Tg6yHu8Ji")\n', "Tg6yHu8Ji"),
        ("db.pl", "local $ENV{DB_PASS} = 'Ik9oLp1Mn';\n", "Ik9oLp1Mn"),
        ("pom.xml", "<properties>\n  <jdbc.pass>Xz7aSd9Fg</jdbc.pass>\n</properties>\n", "Xz7aSd9Fg"),
        ("beans.xml", '<property name="password"><value>Df0gHj2Kl</value></property>\n', "Df0gHj2Kl"),
    ],
)
def test_passwords_set_as_environment_variables_and_spring_values(detector, path, text, value):
    spans, _ = detector.find(text, config=path.endswith((".yaml", ".conf")))
    assert ("PASSWORD", value) in {(s.entity, text[s.start : s.end]) for s in spans}


def test_names_that_only_contain_pass_are_no_password_names(detector):
    assert found(detector, 'BYPASS = "allow-all-hosts"\nCOMPASS = "north-by-west"\nENV PASSAGE_DIR /srv\n') == set()


def test_an_address_in_another_script_is_an_address(detector):
    assert found(detector, "Author: Jörg Müller <jörg@müller.de>\n") >= {("EMAIL", "jörg@müller.de")}
    assert ("EMAIL", "jroe_dev@posteo.de") in found(detector, "mail jroe_dev@posteo.de\n")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("<password><![CDATA[Xk9p#Lm2Qw7]]></password>\n", "Xk9p#Lm2Qw7"),
        ('<Password encrypted="false">Nh8uJi2Ko</Password>\n', "Nh8uJi2Ko"),
        ("<entry>\n  <key>db.password</key>\n  <value>Ol5kIj8Uh</value>\n</entry>\n", "Ol5kIj8Uh"),
        ('<signjar jar="x.jar" alias="rel" storepass="Mn6bVc4Xz" keypass="Pl0oKi9Ju"/>\n', "Mn6bVc4Xz"),
    ],
)
def test_passwords_in_xml_cdata_attributes_and_key_value_pairs(detector, text, value):
    assert ("PASSWORD", value) in found(detector, text)


def test_the_holders_on_a_copyrights_next_line(detector):
    text = "Copyright 2006-11 Perrin Harkins,\n2007-2011 Elliot Shank, 2009-2010 Thomas R. Wyant, III, 2017 Dan Book."
    assert found(detector, text) == {
        ("NAME", "Perrin Harkins"), ("NAME", "Elliot Shank"), ("NAME", "Thomas R. Wyant"), ("NAME", "Dan Book"),
    }  # fmt: skip
    assert found(detector, "# Copyright (c) 2020 Ilse Vandamme\n# 2021 rewrite of the parser\n") == {
        ("NAME", "Ilse Vandamme")
    }


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ('url = "amqp://worker:Vt9#xk/Lp2=Qw8@rabbit.acme.io:5672//"\n', "Vt9#xk/Lp2=Qw8"),  # `/` and `#` unescaped
        ("mongodb://jroe:q7Fz%Wk2@rT9!mB@mongo1.acme.io:27017/admin\n", "q7Fz%Wk2@rT9!mB"),  # `@` unescaped
        ('dsn := "mysql://gouser:Hb7@vN2!x@tcp(88.12.4.9:3306)/db"\n', "Hb7@vN2!x"),  # Go's `@tcp(host)`
        ('url = "postgres://jroe:Qx{7}zL9p@db1.acme.io/db"\n', "Qx{7}zL9p"),
        ('DATABASE_URL="postgres://app:Xk%21q9%40zLw2@db1.acme.io/app"\n', "Xk%21q9%40zLw2"),  # escaped for its URL
        ("export http_proxy=jroe:Kq7-wR2zLm9x@proxy.acme.de:3128\n", "Kq7-wR2zLm9x"),  # a proxy without a scheme
    ],
)
def test_url_passwords_as_people_write_them(detector, text, password):
    got = found(detector, text)
    assert ("PASSWORD", password) in got
    assert not any(entity == "EMAIL" for entity, _ in got)  # `mB@mongo1.acme.io` is the password's end


@pytest.mark.parametrize(
    "text",
    [
        'url = f"postgres://{user}:{password}@{host}/db"\n',
        'URL="mysql://$USER:${PASS}@db1/app"\n',
        "see http://files.acme.io:8080/users/jroe@posteo.de for the list\n",  # a port, then an address in a path
        'export https_proxy="http://proxy.acme.de:3128/"\n',
    ],
)
def test_url_slots_ports_and_paths_are_no_passwords(detector, text):
    assert not any(entity == "PASSWORD" for entity, _ in found(detector, text))


def test_an_address_in_a_urls_path_after_a_port_is_an_address(detector):
    assert ("EMAIL", "jroe@posteo.de") in found(detector, "see http://files.acme.io:8080/users/jroe@posteo.de now\n")


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ('Net::FTP.open("ftp.acme.de", "jroe", "Kq7-wR2zLm9x")\n', "Kq7-wR2zLm9x"),
        ('new UsernamePasswordCredentials("jroe", "E9lSi0tcL21pffWQ=J+E")\n', "E9lSi0tcL21pffWQ=J+E"),
        ('my $dbh = DBI->connect($dsn, "jroe", "qM=Rb1OcWrhQ7TTJ#c");\n', "qM=Rb1OcWrhQ7TTJ#c"),
    ],
)
def test_positional_passwords_of_ftp_clients_and_ones_shaped_like_a_setting(detector, text, password):
    assert ("PASSWORD", password) in found(detector, text)


def test_a_setting_handed_to_a_connect_call_is_no_password(detector):
    assert found(detector, 'psycopg.connect(dsn, "sslmode=require", "ApplicationName=etl")\n') == set()


@pytest.mark.parametrize(
    "text",
    [
        'poll pop.acme.net proto pop3 user "jsmith" with pass "Kq7-wR2zLm9x" is "jsmith" here\n',
        "poll mail.acme.de\n   user jroe pass Kq7-wR2zLm9x\n",
        "machine ftp.acme.de\n  login jroe\n  password Kq7-wR2zLm9x\n\nmachine b.acme.de\n  login x\n",
    ],
)
def test_fetchmail_and_netrc_statements_on_one_line_or_several(detector, text):
    assert ("PASSWORD", "Kq7-wR2zLm9x") in found(detector, text)


def test_a_netrc_statement_ends_at_a_blank_line(detector):
    assert found(detector, "machine a.acme.de login jroe\n\nSet the password Kq7-wR2zLm9x in the form.\n") == set()


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("etc/nslcd.conf", "binddn cn=admin,dc=acme,dc=de\nbindpw Lq8-Kx2wZm\n"),
        ("etc/ldap/slapd.conf", "rootpw Lq8-Kx2wZm\n"),
        ("etc/keepalived/keepalived.conf", "  authentication {\n    auth_type PASS\n    auth_pass Lq8-Kx2wZm\n"),
        ("etc/apache2/sites-available/ldap.conf", "AuthLDAPBindPassword Lq8-Kx2wZm\n"),
        ("etc/mosquitto/conf.d/bridge.conf", "remote_username jroe\nremote_password Lq8-Kx2wZm  # bridge\n"),
        ("etc/msmtprc", "account gmail\nuser jroe\npassword Lq8-Kx2wZm\n"),  # a run-control file is a config
        ("etc/postfix/mysql-virtual.cf", "user = postfix\npassword = Lq8-Kx2wZm\n"),
        ("etc/wgetrc", "proxy_user = jroe\nproxy_password = Lq8-Kx2wZm\n"),
        ("etc/nut/upsmon", "password = Lq8-Kx2wZm\n"),  # a file in etc/ without an extension
        ("etc/backup.d/20.mysql", "user = backup\ndbpassword = Lq8-Kx2wZm\n"),  # or with one of no code
    ],
)
def test_config_directives_written_name_then_value(path, text):
    table = pa.table({"path": [path], "content": [text]})
    spans = PiiStage(PiiConfig(model="none"))(table).kept.column("pii_spans").to_pylist()[0]
    assert [(s["entity"], text[s["start"] : s["end"]]) for s in spans if s["entity"] == "PASSWORD"] == [
        ("PASSWORD", "Lq8-Kx2wZm")
    ]


@pytest.mark.parametrize(
    "text",
    [
        "location / {\n  proxy_pass http://backend:8080;\n  fastcgi_pass unix:/run/php/fpm.sock;\n}\n",
        "PASS_MAX_DAYS 99999\nPASS_MIN_LEN 5\n",
        "PasswordAuthentication no\nPermitEmptyPasswords no\n",
        "PassengerRuby /usr/bin/ruby3.1\nbypass 10.0.0.0/8\n",
        "auth_pass ${KEEPALIVED_PASS}\n",
    ],
)
def test_directives_that_only_mention_a_password_are_left(detector, text):
    spans, _ = detector.find(text, config=True)
    assert [s for s in spans if s.entity == "PASSWORD"] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("curlSetOpt(cookie = '_ZopeId=\"19859283A3b5b4d9\"', curl = h)\n", "19859283A3b5b4d9"),  # short hex
        ('getURL(u, cookie = "_ZopeId=%2219859283A3b5b4d9%22")\n', "19859283A3b5b4d9"),
        ("Cookie: ASP.NET_SessionId=xk4z1m2n3b5v6c7x8z9a0s1d; path=/\n", "xk4z1m2n3b5v6c7x8z9a0s1d"),
        ("Set-Cookie: ASPSESSIONIDQQGGQRRS=KMHJBPLBOIMKGHJDLKLPFGAC9; path=/\n", "KMHJBPLBOIMKGHJDLKLPFGAC9"),
    ],
)
def test_session_cookies_of_other_servers_by_their_names(detector, text, value):
    assert ("KEY", value) in found(detector, text)


def test_a_session_cookie_of_one_repeated_digit_or_a_word_is_no_key(detector):
    assert (
        found(detector, "Cookie: ASP.NET_SessionId=1111111111111111; x=y\nSESSION_KEY=session_cookie_name\n") == set()
    )


@pytest.mark.parametrize(
    ("text", "address"),
    [
        (" * @author fredt@users dot sourceforge.net\n", "fredt@users dot sourceforge.net"),
        ("Mike Nerone <mi\\x40alma.ch>\n", "mi\\x40alma.ch"),
        ('my $email = "jroe\\@cpan.org";\n', "jroe\\@cpan.org"),  # Perl's escaped `@`
        ('<a href="mailto:jroe&#64;posteo.de">Jane</a>\n', "jroe&#64;posteo.de"),
        ("jroe&#x40;posteo.de\n", "jroe&#x40;posteo.de"),
        ("https://lists.acme.io/subscribe?email=jroe%40posteo.de&x=1\n", "jroe%40posteo.de"),
    ],
)
def test_an_at_escaped_or_a_dot_spelled_out(detector, text, address):
    assert ("EMAIL", address) in found(detector, text)


def test_escaped_example_addresses_and_spelled_dots_in_prose_are_left(detector):
    text = 'x = "jroe&#64;example.com"\nmy $x = "me\\@localhost.localdomain";\nlook at x@2x dot png\nme@home dot not\n'
    assert found(detector, text) == set()


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ('Executor.newInstance().auth(new HttpHost("h.acme.de"), "jroe", "NT-d7FguoV8FW?n~")\n', "NT-d7FguoV8FW?n~"),
        ('Transport.send(message, "jroe@gmail.com", "pB0JxXujr4qq");\n', "pB0JxXujr4qq"),  # JavaMail
        ('<scp file="x.jar" todir="jroe:Ex98whGcTZ1b@host.acme.de:/srv"/>\n', "Ex98whGcTZ1b"),  # Ant
        ("scp -r build jroe:Ex98whGcTZ1b@host.acme.de:/srv\n", "Ex98whGcTZ1b"),
        ('props.put("mail.smtp.password", "qwhz mkvb tnoy rhxe");\n', "qwhz mkvb tnoy rhxe"),  # a Google app password
        ("spring.mail.password=qwhz mkvb tnoy rhxe\n", "qwhz mkvb tnoy rhxe"),
        # code shown in HTML: its quotes and brackets escaped
        ("&lt;scp file=&quot;x.jar&quot; todir=&quot;jroe:Ex98whGcTZ1b@host:/srv&quot;/&gt;\n", "Ex98whGcTZ1b"),
        ("&lt;ftp server=&quot;ftp.acme.de&quot;\n   password=&quot;Ex98whGcTZ1b&quot;&gt;\n", "Ex98whGcTZ1b"),
        ("<code>&lt;password&gt;Ex98whGcTZ1b&lt;/password&gt;</code>\n", "Ex98whGcTZ1b"),
        ("jdbc:mysql://db1/app?user=jroe&amp;password=Ex98whGcTZ1b&amp;ssl=true\n", "Ex98whGcTZ1b"),
        ("<td>mysql -u jroe -pEx98whGcTZ1b</td>\n", "Ex98whGcTZ1b"),
    ],
)
def test_jvm_mail_and_scp_credentials_and_code_shown_in_html(detector, text, password):
    assert ("PASSWORD", password) in found(detector, text)


def test_scp_targets_without_a_password_and_four_word_prose_are_no_passwords(detector):
    text = (
        '<scp file="x.jar" todir="jroe@host.acme.de:/srv" keyfile="${user.home}/.ssh/id_rsa"/>\n'
        "scp build/x.tgz deploy@host.acme.de:/srv\n"
        'auth_note = "this gets sent when done"\n'
    )
    assert not any(entity == "PASSWORD" for entity, _ in found(detector, text))


def test_make_variables_escaped_words_and_dictionary_words_are_no_passwords(detector):
    text = (
        "\ttwine upload --repository testpypi --password $$TWINE_TEST_PASSWORD dist/*\n"  # Make's `$$`
        "    ('http://u:%D0%BF%D0%B0%D1%80%D0%BE%D0%BB%D1%8C@host/', 'x'),\n"  # `пароль`, percent-escaped
        "    ('http://u:%25cf%2580@host/', 'x'),\n"  # `π`, percent-escaped twice
        'client.connect(username="slowdive", password="television")\n'  # a test's made-up word
    )
    assert not any(entity == "PASSWORD" for entity, _ in found(detector, text))
    assert ("PASSWORD", "Television7") in found(
        detector, 'client.connect(username="slowdive", password="Television7")\n'
    )


def test_code_in_an_etc_folder_is_read_as_code():
    text = "password = Lq8-Kx2wZm\n"
    for path, expected in (("etc/backup.d/20.mysql", 1), ("etc/tools/backup.py", 0)):
        table = pa.table({"path": [path], "content": [text]})
        spans = PiiStage(PiiConfig(model="none"))(table).kept.column("pii_spans").to_pylist()[0]
        assert len(spans) == expected, path


@pytest.mark.parametrize(
    "text",
    [
        'client.login("jroe", "L{n&rIFAh2e`hUUwF")\n',
        "$cfg['password'] = 'L{n&rIFAh2e`hUUwF';\n",
        'con <- dbConnect(RPostgres::Postgres(), user = "jroe", password = "L{n&rIFAh2e`hUUwF")\n',
    ],
)
def test_a_backtick_inside_a_quoted_password_is_the_passwords(detector, text):
    assert ("PASSWORD", "L{n&rIFAh2e`hUUwF") in found(detector, text)


@pytest.mark.parametrize(
    "text",
    [
        'url = "smtp://bot@acme-mail.de:Ex98whGcTZ1b@smtp.acme-mail.de:587"\n',  # an address as the user
        "conn = 'amqp://app:Ex98whGcTZ1b@%s:5672/' % host\n",  # the host a format's slot
        'url = f"postgres://app:Ex98whGcTZ1b@{host}:5432/db"\n',
        'url = "mysql://root:Ex98whGcTZ1b@" + host + "/db"\n',
        'my $url = "mysql://app:Ex98whGcTZ1b\\@db01.acme.de/shop";\n',  # Perl's escaped `@`
        "jdbc.url=jdbc:sqlserver://db01:1433;databaseName=shop;user=app;password=Ex98whGcTZ1b;encrypt=true\n",
        "sqlplus -s system/Ex98whGcTZ1b@//db.acme.de:1521/XE @load.sql\n",  # Oracle's tools
        "expdp userid=scott/Ex98whGcTZ1b@orcl directory=dp dumpfile=x.dmp\n",
        'conn = oracledb.connect("scott/Ex98whGcTZ1b@db.acme.de/orclpdb")\n',
        "cqlsh -u cassandra -p Ex98whGcTZ1b 10.0.0.2\n",  # a user's flag, then a password's
        'sqlcmd -S localhost -U sa -P Ex98whGcTZ1b -Q "SELECT 1"\n',
        "influx -username admin -password Ex98whGcTZ1b\n",
        'Connect-VIServer -Server vc01 -User admin -Password "Ex98whGcTZ1b"\n',
        "plink -ssh -l deploy -pw Ex98whGcTZ1b host.acme.de\n",
        'echo "Ex98whGcTZ1b" | sudo -S apt-get update\n',  # piped to what reads standard input
        "echo Ex98whGcTZ1b | docker login -u jroe --password-stdin registry.acme.de\n",
        '$pw = ConvertTo-SecureString "Ex98whGcTZ1b" -AsPlainText -Force\n',
        "const sequelize = new Sequelize('shop', 'app', 'Ex98whGcTZ1b', { dialect: 'mysql' });\n",
        'pop.pass_("Ex98whGcTZ1b")\n',
        "DB_PASSWORD ?= Ex98whGcTZ1b\n",  # Make
        "export DB_PASS := Ex98whGcTZ1b\n",
        'variable "db_password" {\n  type    = string\n  default = "Ex98whGcTZ1b"\n}\n',  # Terraform
        "- **Password**: `Ex98whGcTZ1b`\n",  # documentation
        "Username: admin\nPassword: Ex98whGcTZ1b\n",
        ":password: Ex98whGcTZ1b\n",
        "Log in as `root` with password `Ex98whGcTZ1b`.\n",
        "The default password is Ex98whGcTZ1b.\n",
    ],
)
def test_url_oracle_flag_pair_stdin_make_terraform_and_documentation_passwords(detector, text):
    assert ("PASSWORD", "Ex98whGcTZ1b") in found(detector, text), text


@pytest.mark.parametrize("secret", ["cZBXBmXzJyarb", "NZItoXwTtQYku", "?HGNbf66TD*4A8QsX3"])
@pytest.mark.parametrize(
    "template",
    [
        "url=jdbc:postgresql://db01:5432/shop?user=app&password={s}\n",
        'con <- dbConnect(odbc::odbc(), .connection_string = "Server=db01;UID=app;PWD={s};")\n',
        'DB = "mysql://app:{s}@db01.acme.de:3306/shop"\n',
        "spring.datasource.password={s}\n",
    ],
)
def test_random_letters_alone_and_a_leading_question_mark_are_still_passwords(detector, template, secret):
    """One in eight random 12-character passwords holds no digit; `?` alone is a bind parameter, not `?H...`."""
    text = template.format(s=secret)
    assert ("PASSWORD", secret) in found(detector, text), text


@pytest.mark.parametrize(
    "text",
    [
        "docker run -u 1000 -p 8080:80 nginx",  # a published port
        "docker run -u root -p 127.0.0.1:80:80 web",
        "python -u script.py -p no:cacheprovider",  # a plugin's name
        "mysql -u root -p shopdb",  # the client prompts; `shopdb` is the database
        "ssh -l root -p 2222 host.acme.de",
        "psql -U postgres -p 5432 -d db",
        'useradd -u 1001 -p "$HASH" jroe',
        'echo "Hello world" | sudo -S ls',
        "sqlplus / as sysdba",
        "sqlplus -s /nolog",
        "COMPASS_VERSION := 1.2.3",  # Make variables that are no passwords
        "PASS_TESTS := $(wildcard t/*)",
        "  password: string;",  # types and schemas
        "  password: String?",
        "  password: z.string().min(8),",
        "- Password: required",  # prose
        "The password is hashed with bcrypt.",
        "The password is `${DB_PASSWORD}`.",
        "password: v1.2.3",
        "password: new_pass1",
        "* password: ~/.secrets/pw",
        "    password = user2",
        "db.password=getHTTPResponse",
    ],
)
def test_ports_plugins_prompts_types_and_prose_are_no_passwords(detector, text):
    assert not any(entity == "PASSWORD" for entity, _ in found(detector, text + "\n")), text


@pytest.mark.parametrize(
    "text",
    [
        'Authentication a = new UsernamePasswordAuthenticationToken("admin", "Ex98whGcTZ1b");\n',  # Spring
        'UsernamePasswordToken token = new UsernamePasswordToken("admin", "Ex98whGcTZ1b");\n',  # Shiro
        'd := gomail.NewDialer("smtp.acme.de", 587, "jroe@acme.de", "Ex98whGcTZ1b")\n',
        'let creds = Credentials::new("jroe@acme.de".to_string(), "Ex98whGcTZ1b".to_string());\n',  # lettre
        'let res = client.get(url).basic_auth("admin", Some("Ex98whGcTZ1b")).send()?;\n',  # reqwest
        'curl_easy_setopt(curl, CURLOPT_PASSWORD, "Ex98whGcTZ1b");\n',
        "resource = RestClient::Resource.new('https://api.acme.de', 'admin', 'Ex98whGcTZ1b')\n",
        'conn = ldap3.Connection(server, "cn=admin,dc=acme,dc=de", "Ex98whGcTZ1b", auto_bind=True)\n',
        "const auth = Buffer.from('admin:Ex98whGcTZ1b').toString('base64');\n",
        "conn = PG.connect('db01', 5432, '', '', 'shop', 'app', 'Ex98whGcTZ1b')\n",
        "db = Mysql.new('localhost', 'root', 'Ex98whGcTZ1b', 'shop')\n",
        'val db = Database.forURL(url, "app", "Ex98whGcTZ1b", driver = "org.postgresql.Driver")\n',
        'def sql = Sql.newInstance("jdbc:mysql://localhost/shop", "root", "Ex98whGcTZ1b", "com.mysql.jdbc.Driver")\n',
        'Jedis jedis = new Jedis("10.0.0.5"); jedis.auth("Ex98whGcTZ1b");\n',
        '$client = new \\GuzzleHttp\\Client(["auth" => ["admin", "Ex98whGcTZ1b"]]);\n',
        '$conn = oci_connect("scott", "Ex98whGcTZ1b", "localhost/XE");\n',
        'conn = cx_Oracle.connect("scott", "Ex98whGcTZ1b", "db.acme.de:1521/orcl")\n',
    ],
)
def test_passwords_handed_to_more_clients_calls(detector, text):
    got = found(detector, text)
    assert ("PASSWORD", "Ex98whGcTZ1b") in got, text
    # the arguments around it are no passwords: a database's address, a driver's class, a database's name
    assert [value for entity, value in got if entity == "PASSWORD"] == ["Ex98whGcTZ1b"], text


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ('DB_PASSWORD = "maple river cloud stone 417"\n', "maple river cloud stone 417"),
        ("password: Maple River Cloud Stone 417\n", "Maple River Cloud Stone 417"),
        ("db.password=maple river cloud stone 417\n", "maple river cloud stone 417"),
        ("<password>maple river cloud stone 417</password>\n", "maple river cloud stone 417"),
        ('{"password": "maple river cloud stone 417"}\n', "maple river cloud stone 417"),
        ('r = requests.get(url, auth=("admin", "maple-river-cloud-stone-417"))\n', "maple-river-cloud-stone-417"),
    ],
)
def test_passphrases_of_words_and_a_number(detector, text, phrase):
    assert ("PASSWORD", phrase) in found(detector, text), text


def test_messages_about_passwords_are_no_passphrases(detector):
    text = (
        'PASSWORD_PROMPT = "enter your password here"\n'
        'PASSWORD_ERROR = "must be at least 8"\n'
        'password_help = "Retry after 30"\n'
        'INVALID_PASSWORD = "Password reset email sent 2"\n'
    )
    assert not any(entity == "PASSWORD" for entity, _ in found(detector, text))
