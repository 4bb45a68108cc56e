import Foundation

/// RFC 9110 §5.6.7 HTTP-date, strictly: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"),
/// and the two obsolete forms recipients must accept, rfc850-date ("Sunday, 06-Nov-94
/// 08:49:37 GMT") and asctime ("Sun Nov  6 08:49:37 1994"). The zone must be GMT, the
/// day name must be that date's, and nothing may follow. (Cookies use RFC 6265's far
/// more lenient date algorithm; a cache may not: an Expires that is not an HTTP-date
/// means "already expired".)
public enum HTTPDate {
    static let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    static let longDays = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    public static func parse(_ text: String) -> Date? {
        let t = text.trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
        let b = Array(t.utf8)
        func num(_ r: Range<Int>) -> Int? {
            guard r.upperBound <= b.count, !r.isEmpty else { return nil }
            var n = 0
            for i in r {
                guard b[i] >= 0x30, b[i] <= 0x39 else { return nil }
                n = n * 10 + Int(b[i] - 0x30)
            }
            return n
        }
        func str(_ r: Range<Int>) -> String? {
            guard r.upperBound <= b.count else { return nil }
            return String(decoding: b[r], as: UTF8.self)
        }
        func time(_ at: Int) -> (Int, Int, Int)? {
            guard at + 8 <= b.count, b[at + 2] == 0x3A, b[at + 5] == 0x3A,
                  let h = num(at..<at + 2), let m = num(at + 3..<at + 5), let s = num(at + 6..<at + 8) else { return nil }
            return (h, m, s)
        }
        var weekday: Int?, day = 0, month = 0, year = 0, hms = (0, 0, 0)
        if b.count == 29, let d = str(0..<3), b[3] == 0x2C, b[4] == 0x20, str(25..<29) == " GMT" {
            // IMF-fixdate
            weekday = days.firstIndex(of: d)
            guard let dd = num(5..<7), b[7] == 0x20, let m = str(8..<11).flatMap({ months.firstIndex(of: $0) }), b[11] == 0x20,
                  let y = num(12..<16), b[16] == 0x20, let tm = time(17) else { return nil }
            (day, month, year, hms) = (dd, m + 1, y, tm)
        } else if b.count == 24, let d = str(0..<3), b[3] == 0x20 {
            // asctime: "Sun Nov  6 08:49:37 1994"
            weekday = days.firstIndex(of: d)
            guard let m = str(4..<7).flatMap({ months.firstIndex(of: $0) }), b[7] == 0x20 else { return nil }
            let dd = b[8] == 0x20 ? num(9..<10) : num(8..<10)
            guard let dd, b[10] == 0x20, let tm = time(11), b[19] == 0x20, let y = num(20..<24) else { return nil }
            (day, month, year, hms) = (dd, m + 1, y, tm)
        } else if let comma = b.firstIndex(of: 0x2C), let d = str(0..<comma), b.count == comma + 24,
                  str(comma + 20..<comma + 24) == " GMT" {
            // rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT"; a two-digit year more than 50
            // years ahead is in the past century (RFC 9110).
            weekday = longDays.firstIndex(of: d)
            let at = comma + 2
            guard b[comma + 1] == 0x20, let dd = num(at..<at + 2), b[at + 2] == 0x2D,
                  let m = str(at + 3..<at + 6).flatMap({ months.firstIndex(of: $0) }), b[at + 6] == 0x2D,
                  let yy = num(at + 7..<at + 9), b[at + 9] == 0x20, let tm = time(at + 10) else { return nil }
            let thisYear = Calendar(identifier: .gregorian).component(.year, from: Date())
            var y = (thisYear / 100) * 100 + yy
            if y > thisYear + 50 { y -= 100 }
            (day, month, year, hms) = (dd, m + 1, y, tm)
        } else {
            return nil
        }
        guard let weekday, (1...31).contains(day), hms.0 < 24, hms.1 < 60, hms.2 < 61 else { return nil }
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = TimeZone(identifier: "GMT") ?? utc.timeZone
        let parts = DateComponents(year: year, month: month, day: day, hour: hms.0, minute: hms.1, second: min(hms.2, 59))
        guard let date = utc.date(from: parts), utc.component(.day, from: date) == day else { return nil }
        // Calendar weekday: 1 is Sunday; ours: 0 is Monday.
        guard (utc.component(.weekday, from: date) + 5) % 7 == weekday else { return nil }
        return date
    }
}
