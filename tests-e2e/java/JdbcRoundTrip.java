import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

/** java -cp meltano-clickhouse-bridge.jar JdbcRoundTrip.java JDBC_URL: the official driver with default settings. */
public class JdbcRoundTrip {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", "default");
        props.setProperty("password", "");
        try (Connection c = new com.clickhouse.jdbc.Driver().connect(args[0], props); Statement st = c.createStatement()) {
            st.execute("CREATE TABLE jdbc_rt (k String, v UInt64) ENGINE = ReplacingMergeTree(v) ORDER BY k");
            System.out.println("created");
            int n = st.executeUpdate("INSERT INTO jdbc_rt VALUES ('a', 1), ('a', 2), ('b', 1)");
            System.out.println("inserted " + n);
            StringBuilder out = new StringBuilder("final");
            try (ResultSet rs = st.executeQuery("SELECT k, v FROM jdbc_rt FINAL ORDER BY k")) {
                while (rs.next()) {
                    out.append(' ').append(rs.getString(1)).append('=').append(rs.getLong(2));
                }
            }
            System.out.println(out);
            st.execute("DELETE FROM jdbc_rt WHERE k = 'a'");
            try (ResultSet rs = st.executeQuery("SELECT count() FROM jdbc_rt FINAL")) {
                rs.next();
                if (rs.getLong(1) != 1) {
                    throw new AssertionError("delete left " + rs.getLong(1) + " rows");
                }
            }
            System.out.println("deleted");
            try {
                st.executeQuery("SELECT * FROM no_such_table");
            } catch (SQLException e) {
                System.out.println("error " + e.getErrorCode());
            }
        }
    }
}
