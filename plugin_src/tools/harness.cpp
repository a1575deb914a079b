// fusion_harness LIB [--cpu] [--json FILE] [--bench SPEC ...]
//
// Drives each plugin of LIB through its IPluginV3 interfaces the way TensorRT does, with
// this file's own implementations of what TensorRT hands a plugin (IExprBuilder /
// IDimensionExpr via apiv::VExprBuilder / VDimensionExpr, DynamicPluginTensorDesc,
// PluginTensorDesc, IPluginResourceContext, workspace):
//
//   getCreators -> createPlugin(fields, kBUILD) -> getOutputDataTypes -> getOutputShapes
//   (symbolic batch dim) -> supportsFormatCombination (accepted and rejected combinations)
//   -> configurePlugin -> getWorkspaceSize -> attachToContext -> onShapeChange -> enqueue
//   -> getFieldsToSerialize -> createPlugin(kRUNTIME) -> attachToContext -> onShapeChange
//   -> enqueue (two shapes) -> clone -> onShapeChange -> enqueue,
//
// comparing every output with a float64 CPU reference.  Also checks that bad fields and
// bad shapes are refused.  --cpu stops before anything that needs a GPU (no CUDA call at
// all); --bench SPEC times enqueue (fc:DTYPE:M:K:N:ACT or norm:OP:DTYPE:ROWS:COLS) from
// CUDA-graph replays.
#include "NvInferRuntime.h"
#include "generated/plugin_specs.h"
#include "tools/fieldValues.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace nvinfer1;
namespace specs = fusion::specs;

namespace
{

// ------------------------------------------------------------------ what TensorRT provides

// A dimension expression: constant, or symbolic with the value it takes in this run.
class Expr : public IDimensionExpr, public apiv::VDimensionExpr
{
public:
    Expr(bool constant, int64_t value)
        : mConstant(constant)
        , mValue(value)
    {
        mImpl = this;
    }
    ~Expr() noexcept override = default;
    bool isConstant() const override
    {
        return mConstant;
    }
    int64_t getConstantValue() const override
    {
        return mConstant ? mValue : -1;
    }
    bool isSizeTensor() const override
    {
        return false;
    }
    int64_t value() const
    {
        return mValue;
    }

private:
    bool mConstant;
    int64_t mValue;
};

class ExprBuilder : public IExprBuilder, public apiv::VExprBuilder
{
public:
    ExprBuilder()
    {
        mImpl = this;
    }
    ~ExprBuilder() noexcept override = default;
    IDimensionExpr const* constant(int64_t value) override
    {
        return make(true, value);
    }
    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) override
    {
        int64_t const x = static_cast<Expr const&>(a).value();
        int64_t const y = static_cast<Expr const&>(b).value();
        int64_t v = 0;
        switch (op)
        {
        case DimensionOperation::kSUM: v = x + y; break;
        case DimensionOperation::kPROD: v = x * y; break;
        case DimensionOperation::kMAX: v = std::max(x, y); break;
        case DimensionOperation::kMIN: v = std::min(x, y); break;
        case DimensionOperation::kSUB: v = x - y; break;
        case DimensionOperation::kEQUAL: v = x == y; break;
        case DimensionOperation::kLESS: v = x < y; break;
        case DimensionOperation::kFLOOR_DIV: v = y ? x / y : 0; break;
        case DimensionOperation::kCEIL_DIV: v = y ? (x + y - 1) / y : 0; break;
        }
        return make(a.isConstant() && b.isConstant(), v);
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override
    {
        return nullptr;
    }
    Expr const* symbol(int64_t value)
    {
        return make(false, value);
    }

private:
    Expr const* make(bool constant, int64_t v)
    {
        mPool.emplace_back(new Expr(constant, v));
        return mPool.back().get();
    }
    std::vector<std::unique_ptr<Expr>> mPool;
};

class ResourceContext : public IPluginResourceContext
{
public:
    IGpuAllocator* getGpuAllocator() const noexcept override
    {
        return nullptr;
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return nullptr;
    }
};

class Logger : public ILogger
{
public:
    void log(Severity severity, AsciiChar const* msg) noexcept override
    {
        if (severity <= Severity::kWARNING)
        {
            last = msg;
            if (verbose)
            {
                fprintf(stderr, "[plugin] %s\n", msg);
            }
        }
    }
    std::string last;
    bool verbose{true};
};

class Finder : public ILoggerFinder
{
public:
    ILogger* findLogger() override
    {
        return &logger;
    }
    Logger logger;
};

Finder gFinder;

// ------------------------------------------------------------------ data

using Shape = std::vector<int64_t>;

int64_t numel(Shape const& s)
{
    int64_t n = 1;
    for (int64_t d : s)
    {
        n *= d;
    }
    return n;
}

Dims toDims(Shape const& s)
{
    Dims d{};
    d.nbDims = static_cast<int32_t>(s.size());
    for (size_t i = 0; i < s.size(); ++i)
    {
        d.d[i] = s[i];
    }
    return d;
}

std::string shapeText(Shape const& s)
{
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i)
    {
        t += (i ? "," : "") + std::to_string(s[i]);
    }
    return t + "]";
}

char const* typeText(DataType t)
{
    return t == DataType::kFLOAT ? "float32" : t == DataType::kHALF ? "float16" : "bfloat16";
}

size_t typeSize(DataType t)
{
    return t == DataType::kFLOAT ? 4 : 2;
}

// Host-side storage as the GPU sees it, plus the exact values it holds (as double).
struct HostTensor
{
    DataType type{DataType::kFLOAT};
    Shape shape;
    std::vector<char> bytes;
    std::vector<double> values;
};

void store(HostTensor& t, size_t i, float v)
{
    if (t.type == DataType::kFLOAT)
    {
        memcpy(&t.bytes[i * 4], &v, 4);
        t.values[i] = v;
    }
    else if (t.type == DataType::kHALF)
    {
        __half const h = __float2half_rn(v);
        memcpy(&t.bytes[i * 2], &h, 2);
        t.values[i] = __half2float(h);
    }
    else
    {
        __nv_bfloat16 const h = __float2bfloat16_rn(v);
        memcpy(&t.bytes[i * 2], &h, 2);
        t.values[i] = __bfloat162float(h);
    }
}

double load(DataType type, char const* bytes, size_t i)
{
    if (type == DataType::kFLOAT)
    {
        float v;
        memcpy(&v, bytes + i * 4, 4);
        return v;
    }
    if (type == DataType::kHALF)
    {
        __half h;
        memcpy(&h, bytes + i * 2, 2);
        return __half2float(h);
    }
    __nv_bfloat16 h;
    memcpy(&h, bytes + i * 2, 2);
    return __bfloat162float(h);
}

HostTensor randomTensor(DataType type, Shape const& shape, std::mt19937& rng, float lo, float hi, float offset = 0.F)
{
    HostTensor t;
    t.type = type;
    t.shape = shape;
    size_t const n = static_cast<size_t>(numel(shape));
    t.bytes.resize(n * typeSize(type));
    t.values.resize(n);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (size_t i = 0; i < n; ++i)
    {
        store(t, i, offset + dist(rng));
    }
    return t;
}

#define CUDA_OK(call)                                                                                                  \
    do                                                                                                                 \
    {                                                                                                                  \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
        {                                                                                                              \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);                   \
            exit(3);                                                                                                   \
        }                                                                                                              \
    } while (0)

struct DeviceBuffer
{
    void* ptr{nullptr};
    size_t bytes{0};
    explicit DeviceBuffer(size_t n)
        : bytes(n)
    {
        if (n > 0)
        {
            CUDA_OK(cudaMalloc(&ptr, n));
        }
    }
    ~DeviceBuffer()
    {
        if (ptr != nullptr)
        {
            cudaFree(ptr);
        }
    }
    DeviceBuffer(DeviceBuffer const&) = delete;
    DeviceBuffer& operator=(DeviceBuffer const&) = delete;
};

// ------------------------------------------------------------------ references

double geluErf(double v)
{
    return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
}

double geluTanh(double v)
{
    return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

std::vector<double> normReference(bool rms, HostTensor const& x, HostTensor const* g, HostTensor const* b,
    int64_t cols, double eps)
{
    int64_t const rows = numel(x.shape) / cols;
    std::vector<double> y(x.values.size());
    for (int64_t r = 0; r < rows; ++r)
    {
        double const* xr = &x.values[static_cast<size_t>(r * cols)];
        double mean = 0;
        if (!rms)
        {
            for (int64_t c = 0; c < cols; ++c)
            {
                mean += xr[c];
            }
            mean /= static_cast<double>(cols);
        }
        double var = 0;
        for (int64_t c = 0; c < cols; ++c)
        {
            var += (xr[c] - mean) * (xr[c] - mean);
        }
        double const inv = 1.0 / std::sqrt(var / static_cast<double>(cols) + eps);
        for (int64_t c = 0; c < cols; ++c)
        {
            double v = (xr[c] - mean) * inv;
            v *= g ? g->values[static_cast<size_t>(c)] : 1.0;
            v += b ? b->values[static_cast<size_t>(c)] : 0.0;
            y[static_cast<size_t>(r * cols + c)] = v;
        }
    }
    return y;
}

// GroupNorm of x [n, c, *spatial]: groups of c / groups channels, per-channel affine, optional SiLU.
std::vector<double> groupNormReference(HostTensor const& x, HostTensor const& g, HostTensor const& b, int64_t groups,
    double eps, bool silu)
{
    int64_t const channels = x.shape[1];
    int64_t const spatial = numel(x.shape) / (x.shape[0] * channels);
    int64_t const cols = channels / groups * spatial;
    int64_t const rows = numel(x.shape) / cols;
    std::vector<double> y(x.values.size());
    for (int64_t r = 0; r < rows; ++r)
    {
        double const* xr = &x.values[static_cast<size_t>(r * cols)];
        double mean = 0;
        for (int64_t i = 0; i < cols; ++i)
        {
            mean += xr[i];
        }
        mean /= static_cast<double>(cols);
        double var = 0;
        for (int64_t i = 0; i < cols; ++i)
        {
            var += (xr[i] - mean) * (xr[i] - mean);
        }
        double const inv = 1.0 / std::sqrt(var / static_cast<double>(cols) + eps);
        for (int64_t i = 0; i < cols; ++i)
        {
            size_t const c = static_cast<size_t>((r % groups) * (channels / groups) + i / spatial);
            double v = (xr[i] - mean) * inv * g.values[c] + b.values[c];
            if (silu)
            {
                v = v / (1.0 + std::exp(-v));
            }
            y[static_cast<size_t>(r * cols + i)] = v;
        }
    }
    return y;
}

std::vector<double> fcReference(HostTensor const& x, HostTensor const& w, HostTensor const& b, int64_t n, bool transW,
    double alpha, std::string const& act)
{
    int64_t const k = x.shape.back();
    int64_t const m = numel(x.shape) / k;
    std::vector<double> y(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
    {
        for (int64_t j = 0; j < n; ++j)
        {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p)
            {
                double const wv = transW ? w.values[static_cast<size_t>(j * k + p)] : w.values[static_cast<size_t>(p * n + j)];
                acc += x.values[static_cast<size_t>(i * k + p)] * wv;
            }
            double v = alpha * acc + b.values[static_cast<size_t>(j)];
            if (act == "relu")
            {
                v = v > 0 ? v : 0;
            }
            else if (act == "gelu_erf")
            {
                v = geluErf(v);
            }
            else if (act == "gelu_tanh")
            {
                v = geluTanh(v);
            }
            y[static_cast<size_t>(i * n + j)] = v;
        }
    }
    return y;
}

// ------------------------------------------------------------------ the library

struct Library
{
    std::map<std::string, IPluginCreatorV3One*> creators;

    bool open(char const* path)
    {
        void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr)
        {
            fprintf(stderr, "error: dlopen: %s\n", dlerror());
            return false;
        }
        auto setLoggerFinder = reinterpret_cast<void (*)(ILoggerFinder*)>(dlsym(lib, "setLoggerFinder"));
        auto getCreators = reinterpret_cast<IPluginCreatorInterface* const* (*) (int32_t&)>(dlsym(lib, "getCreators"));
        if (setLoggerFinder == nullptr || getCreators == nullptr)
        {
            fprintf(stderr, "error: %s lacks setLoggerFinder/getCreators\n", path);
            return false;
        }
        setLoggerFinder(&gFinder);
        int32_t n = 0;
        IPluginCreatorInterface* const* list = getCreators(n);
        for (int32_t i = 0; i < n; ++i)
        {
            InterfaceInfo const info = list[i]->getInterfaceInfo();
            if (strcmp(info.kind, "PLUGIN CREATOR_V3ONE") == 0 && info.major == 1)
            {
                auto* c = static_cast<IPluginCreatorV3One*>(list[i]);
                creators[c->getPluginName()] = c;
            }
        }
        return true;
    }
};

Library gLib;

using FieldList = std::vector<std::pair<std::string, std::string>>;

// createPlugin with text field values typed by the creator's field list.
IPluginV3* create(std::string const& name, FieldList const& fields, TensorRTPhase phase)
{
    auto const it = gLib.creators.find(name);
    if (it == gLib.creators.end())
    {
        return nullptr;
    }
    PluginFieldCollection const* names = it->second->getFieldNames();
    FieldValues values;
    for (auto const& [fname, text] : fields)
    {
        PluginFieldType type = PluginFieldType::kINT32; // unknown names: still passed, as int
        for (int32_t k = 0; k < names->nbFields; ++k)
        {
            if (fname == names->fields[k].name)
            {
                type = names->fields[k].type;
            }
        }
        values.add(fname.c_str(), type, text);
    }
    return it->second->createPlugin(name.c_str(), &values.fc, phase);
}

template <typename T>
T* cap(IPluginV3* p, PluginCapabilityType t)
{
    return p ? static_cast<T*>(p->getCapabilityInterface(t)) : nullptr;
}

// ------------------------------------------------------------------ one case

struct Case
{
    std::string plugin;
    std::string label;
    FieldList fields;
    DataType type;
    std::vector<Shape> inputs; // inputs[0] dim 0 is the dynamic (symbolic) dim
    Shape output;
    std::function<std::vector<double>(std::vector<HostTensor> const&)> reference;
    std::function<std::vector<HostTensor>(std::mt19937&)> makeInputs; // optional
    double atol{1e-4};
    double rtol{1e-4};
    int32_t nbOutputs{1}; // every output has `output`'s shape; only output 0 is compared with `reference`
    // Optional: the reference of output 1 (skip norms' Sum), compared exactly.
    std::function<std::vector<double>(std::vector<HostTensor> const&)> reference1;
};

struct Report
{
    std::ostringstream steps; // JSON object members
    std::vector<std::string> failures;
    int nbSteps{0};
    void step(std::string const& name, bool ok, std::string const& detail = "")
    {
        steps << (nbSteps++ ? ", " : "") << "\"" << name << "\": " << (ok ? "true" : "false");
        if (!ok)
        {
            failures.push_back(name + (detail.empty() ? "" : ": " + detail));
        }
    }
};

std::vector<DynamicPluginTensorDesc> dynamicDescs(std::vector<Shape> const& shapes, DataType type, bool dynamic)
{
    std::vector<DynamicPluginTensorDesc> d(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i)
    {
        d[i].desc.dims = toDims(shapes[i]);
        d[i].desc.type = type;
        d[i].desc.format = TensorFormat::kLINEAR;
        d[i].desc.scale = -1.F;
        d[i].min = d[i].max = d[i].opt = toDims(shapes[i]);
        if (dynamic && i == 0)
        {
            d[i].desc.dims.d[0] = -1;
            d[i].min.d[0] = 1;
            d[i].max.d[0] = shapes[i][0] * 2;
        }
    }
    return d;
}

std::vector<PluginTensorDesc> staticDescs(std::vector<Shape> const& shapes, DataType type)
{
    std::vector<PluginTensorDesc> d(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i)
    {
        d[i].dims = toDims(shapes[i]);
        d[i].type = type;
        d[i].format = TensorFormat::kLINEAR;
        d[i].scale = -1.F;
    }
    return d;
}

// Every position: the case's own combination is accepted, other types/formats are not.
bool checkFormats(IPluginV3OneBuild* build, Case const& c, std::string& why)
{
    size_t const nIn = c.inputs.size();
    std::vector<Shape> all = c.inputs;
    for (int32_t k = 0; k < c.nbOutputs; ++k)
    {
        all.push_back(c.output);
    }
    auto io = dynamicDescs(all, c.type, true);
    DataType const other = c.type == DataType::kFLOAT ? DataType::kHALF : DataType::kFLOAT;
    for (int32_t pos = 0; pos < static_cast<int32_t>(io.size()); ++pos)
    {
        auto probe = [&](DataType t, TensorFormat f) {
            auto copy = io;
            copy[static_cast<size_t>(pos)].desc.type = t;
            copy[static_cast<size_t>(pos)].desc.format = f;
            return build->supportsFormatCombination(pos, copy.data(), static_cast<int32_t>(nIn), c.nbOutputs);
        };
        if (!probe(c.type, TensorFormat::kLINEAR))
        {
            why = "rejects its own type at pos " + std::to_string(pos);
            return false;
        }
        if (probe(DataType::kINT8, TensorFormat::kLINEAR) || probe(c.type, TensorFormat::kCHW32)
            || probe(DataType::kINT32, TensorFormat::kLINEAR))
        {
            why = "accepts int8/int32/CHW32 at pos " + std::to_string(pos);
            return false;
        }
        if (pos > 0 && probe(other, TensorFormat::kLINEAR))
        {
            why = "accepts a type other than X's at pos " + std::to_string(pos);
            return false;
        }
    }
    return true;
}

struct Compare
{
    double maxAbs{0};
    double maxRel{0};
    int64_t bad{0};
    int64_t nonFinite{0};
};

Compare compare(std::vector<char> const& got, DataType type, std::vector<double> const& ref, double atol, double rtol)
{
    Compare c;
    for (size_t i = 0; i < ref.size(); ++i)
    {
        double const v = load(type, got.data(), i);
        if (!std::isfinite(v))
        {
            ++c.nonFinite;
            ++c.bad;
            continue;
        }
        double const err = std::fabs(v - ref[i]);
        c.maxAbs = std::max(c.maxAbs, err);
        c.maxRel = std::max(c.maxRel, err / std::max(std::fabs(ref[i]), 1e-3));
        if (err > atol + rtol * std::fabs(ref[i]))
        {
            ++c.bad;
        }
    }
    return c;
}

std::string runCase(Case const& c, bool cpuOnly, std::mt19937& rng, bool& ok)
{
    Report r;
    ExprBuilder eb;
    ResourceContext ctx;
    size_t const nIn = c.inputs.size();

    std::unique_ptr<IPluginV3> plugin(create(c.plugin, c.fields, TensorRTPhase::kBUILD));
    r.step("create", plugin != nullptr, gFinder.logger.last);
    auto* core = cap<IPluginV3OneCore>(plugin.get(), PluginCapabilityType::kCORE);
    auto* build = cap<IPluginV3OneBuild>(plugin.get(), PluginCapabilityType::kBUILD);
    auto* runtime = cap<IPluginV3OneRuntime>(plugin.get(), PluginCapabilityType::kRUNTIME);
    bool const caps = core && build && runtime;
    if (plugin)
    {
        r.step("capabilities", caps);
    }
    size_t workspace = 0;
    if (caps)
    {
        r.step("identity", c.plugin == core->getPluginName());
        r.step("nb_outputs", build->getNbOutputs() == c.nbOutputs);
        std::vector<DataType> inTypes(nIn, c.type);
        std::vector<DataType> outTypes(static_cast<size_t>(c.nbOutputs), DataType::kINT8);
        bool typesOk = build->getOutputDataTypes(outTypes.data(), c.nbOutputs, inTypes.data(), static_cast<int32_t>(nIn)) == 0;
        for (DataType t : outTypes)
        {
            typesOk = typesOk && t == c.type;
        }
        r.step("output_types", typesOk);

        // Shapes: dim 0 of X symbolic (value = its size in this run), the rest constants.
        std::vector<DimsExprs> in(nIn);
        for (size_t i = 0; i < nIn; ++i)
        {
            in[i].nbDims = static_cast<int32_t>(c.inputs[i].size());
            for (size_t d = 0; d < c.inputs[i].size(); ++d)
            {
                in[i].d[d] = (i == 0 && d == 0) ? eb.symbol(c.inputs[i][d]) : eb.constant(c.inputs[i][d]);
            }
        }
        std::vector<DimsExprs> outs(static_cast<size_t>(c.nbOutputs));
        bool shapeOk
            = build->getOutputShapes(in.data(), static_cast<int32_t>(nIn), nullptr, 0, outs.data(), c.nbOutputs, eb) == 0;
        for (DimsExprs const& out : outs)
        {
            shapeOk = shapeOk && out.nbDims == static_cast<int32_t>(c.output.size());
            for (int32_t d = 0; shapeOk && d < out.nbDims; ++d)
            {
                auto const* e = static_cast<Expr const*>(out.d[d]);
                shapeOk = e != nullptr && e->value() == c.output[static_cast<size_t>(d)] && (e->isConstant() == (d != 0));
            }
        }
        r.step("output_shapes", shapeOk, "expected " + shapeText(c.output));

        std::string why;
        r.step("formats", checkFormats(build, c, why), why);

        auto inD = dynamicDescs(c.inputs, c.type, true);
        auto outD = dynamicDescs(std::vector<Shape>(static_cast<size_t>(c.nbOutputs), c.output), c.type, true);
        r.step("configure",
            build->configurePlugin(inD.data(), static_cast<int32_t>(nIn), outD.data(), c.nbOutputs) == 0,
            gFinder.logger.last);
        workspace = build->getWorkspaceSize(inD.data(), static_cast<int32_t>(nIn), outD.data(), c.nbOutputs);
        r.step("workspace", workspace < (size_t{1} << 30));

        // Serialize -> recreate (engine deserialization) -> fields agree; clone agrees.
        PluginFieldCollection const* ser = runtime->getFieldsToSerialize();
        std::unique_ptr<IPluginV3> again(
            ser ? gLib.creators[c.plugin]->createPlugin(c.plugin.c_str(), ser, TensorRTPhase::kRUNTIME) : nullptr);
        r.step("recreate", again != nullptr, gFinder.logger.last);
    }

    if (!cpuOnly && caps && r.failures.empty())
    {
        std::vector<HostTensor> host;
        if (c.makeInputs)
        {
            host = c.makeInputs(rng);
        }
        else
        {
            for (size_t i = 0; i < nIn; ++i)
            {
                host.push_back(i == 0 ? randomTensor(c.type, c.inputs[i], rng, -2.F, 2.F)
                                      : randomTensor(c.type, c.inputs[i], rng, -1.5F, 1.5F));
            }
        }
        std::vector<std::unique_ptr<DeviceBuffer>> dIn;
        std::vector<void const*> inPtrs;
        for (auto const& h : host)
        {
            dIn.emplace_back(new DeviceBuffer(h.bytes.size()));
            CUDA_OK(cudaMemcpy(dIn.back()->ptr, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice));
            inPtrs.push_back(dIn.back()->ptr);
        }
        size_t const outBytes = static_cast<size_t>(numel(c.output)) * typeSize(c.type);
        DeviceBuffer dOut(outBytes);
        DeviceBuffer dOut1(c.nbOutputs > 1 ? outBytes : 0);
        DeviceBuffer dWs(workspace);
        cudaStream_t stream;
        CUDA_OK(cudaStreamCreate(&stream));
        std::vector<double> const ref = c.reference(host);

        // Runs `p` on the case's shapes with X's dim 0 cut to `rows0` (a shape change), and that
        // of every input shaped like X (a skip norm's residual), which must change with it.
        auto runOn = [&](IPluginV3* p, std::string const& stage, int64_t rows0) {
            auto* rt = cap<IPluginV3OneRuntime>(p, PluginCapabilityType::kRUNTIME);
            if (rt == nullptr)
            {
                r.step(stage, false, "no runtime capability");
                return;
            }
            std::vector<Shape> ins = c.inputs;
            Shape outS = c.output;
            for (Shape& in : ins)
            {
                if (in == c.inputs[0])
                {
                    in[0] = rows0;
                }
            }
            outS[0] = rows0;
            auto inD = staticDescs(ins, c.type);
            auto outD = staticDescs(std::vector<Shape>(static_cast<size_t>(c.nbOutputs), outS), c.type);
            CUDA_OK(cudaMemsetAsync(dOut.ptr, 0xFF, outBytes, stream)); // NaN-fill: unwritten output shows
            if (c.nbOutputs > 1)
            {
                CUDA_OK(cudaMemsetAsync(dOut1.ptr, 0xFF, outBytes, stream));
            }
            bool ok2 = rt->onShapeChange(inD.data(), static_cast<int32_t>(nIn), outD.data(), c.nbOutputs) == 0;
            void* outPtrs[2] = {dOut.ptr, dOut1.ptr};
            ok2 = ok2
                && rt->enqueue(inD.data(), outD.data(), inPtrs.data(), outPtrs, workspace ? dWs.ptr : nullptr, stream)
                    == 0;
            CUDA_OK(cudaStreamSynchronize(stream));
            if (!ok2)
            {
                r.step(stage, false, gFinder.logger.last);
                return;
            }
            size_t const n = static_cast<size_t>(numel(outS));
            std::vector<char> got(n * typeSize(c.type));
            CUDA_OK(cudaMemcpy(got.data(), dOut.ptr, got.size(), cudaMemcpyDeviceToHost));
            std::vector<double> refPart(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(n));
            Compare const cmp = compare(got, c.type, refPart, c.atol, c.rtol);
            std::ostringstream d;
            d << "max_abs_err " << cmp.maxAbs << ", " << cmp.bad << " of " << n << " out of tolerance";
            r.step(stage, cmp.bad == 0, d.str());
            r.steps << ", \"" << stage << "_max_abs_err\": " << cmp.maxAbs;
            if (c.reference1)
            {
                std::vector<double> const ref1 = c.reference1(host);
                std::vector<char> got1(n * typeSize(c.type));
                CUDA_OK(cudaMemcpy(got1.data(), dOut1.ptr, got1.size(), cudaMemcpyDeviceToHost));
                Compare const cmp1 = compare(got1, c.type,
                    std::vector<double>(ref1.begin(), ref1.begin() + static_cast<std::ptrdiff_t>(n)), 0.0, 0.0);
                r.step(stage + "_sum", cmp1.bad == 0, std::to_string(cmp1.bad) + " of " + std::to_string(n) + " differ");
            }
        };

        int64_t const rows0 = c.inputs[0][0];
        std::unique_ptr<IPluginV3> attached(runtime->attachToContext(&ctx));
        r.step("attach", attached != nullptr);
        if (attached)
        {
            runOn(attached.get(), "enqueue_build", rows0);
        }
        PluginFieldCollection const* ser = runtime->getFieldsToSerialize();
        std::unique_ptr<IPluginV3> recreated(
            gLib.creators[c.plugin]->createPlugin(c.plugin.c_str(), ser, TensorRTPhase::kRUNTIME));
        auto* rrt = cap<IPluginV3OneRuntime>(recreated.get(), PluginCapabilityType::kRUNTIME);
        std::unique_ptr<IPluginV3> context(rrt ? rrt->attachToContext(&ctx) : nullptr);
        r.step("deserialize", context != nullptr);
        if (context)
        {
            runOn(context.get(), "enqueue_deserialized", rows0);
            if (rows0 > 1)
            {
                runOn(context.get(), "enqueue_shape_change", rows0 / 2);
            }
            std::unique_ptr<IPluginV3> cloned(context->clone());
            r.step("clone", cloned != nullptr);
            if (cloned)
            {
                runOn(cloned.get(), "enqueue_clone", rows0);
            }
        }
        CUDA_OK(cudaStreamDestroy(stream));
        r.step("cuda_errors", cudaGetLastError() == cudaSuccess);
    }

    ok = r.failures.empty();
    std::ostringstream o;
    o << "{\"plugin\": \"" << c.plugin << "\", \"case\": \"" << c.label << "\", \"dtype\": \"" << typeText(c.type)
      << "\", \"x\": \"" << shapeText(c.inputs[0]) << "\", \"inputs\": " << nIn << ", \"ok\": "
      << (ok ? "true" : "false") << ", \"steps\": {" << r.steps.str() << "}, \"failures\": [";
    for (size_t i = 0; i < r.failures.size(); ++i)
    {
        o << (i ? ", " : "") << "\"";
        for (char ch : r.failures[i])
        {
            o << (ch == '"' || ch == '\\' ? "'" : std::string(1, ch));
        }
        o << "\"";
    }
    o << "]}";
    return o.str();
}

// ------------------------------------------------------------------ the cases

std::string num(double v)
{
    std::ostringstream o;
    o.precision(9);
    o << v;
    return o.str();
}

DataType const kTYPES[] = {DataType::kFLOAT, DataType::kHALF, DataType::kBF16};

void tolerances(Case& c, bool fc)
{
    if (c.type == DataType::kFLOAT)
    {
        c.atol = fc ? 2e-4 : 1e-4;
        c.rtol = fc ? 2e-4 : 1e-4;
    }
    else if (c.type == DataType::kHALF)
    {
        c.atol = 5e-3;
        c.rtol = 5e-3;
    }
    else
    {
        c.atol = 2e-2;
        c.rtol = 1.6e-2;
    }
}

std::vector<Case> normCases()
{
    std::vector<Case> cases;
    struct S
    {
        Shape x;
        int axis;
        double eps;
    };
    // cols: 1025 (no 16-byte rows), 768 (warp path), 64*48 over two dims (block path).
    S const shapes[] = {{{4, 37, 1025}, -1, 1e-5}, {{6, 8, 768}, -1, 1e-6}, {{3, 4, 64, 48}, -2, 1e-2}};
    for (bool rms : {false, true})
    {
        for (DataType t : kTYPES)
        {
            for (S const& s : shapes)
            {
                int const maxIn = rms ? 2 : 3;
                for (int nIn = 1; nIn <= maxIn; ++nIn)
                {
                    Case c;
                    c.plugin = rms ? specs::fused_rms_norm::kSPEC.name : specs::fused_layer_norm::kSPEC.name;
                    c.type = t;
                    c.fields = {{"epsilon", num(s.eps)}, {"axis", std::to_string(s.axis)}};
                    int const first = static_cast<int>(s.x.size()) + s.axis;
                    Shape norm(s.x.begin() + first, s.x.end());
                    c.inputs.push_back(s.x);
                    for (int i = 1; i < nIn; ++i)
                    {
                        c.inputs.push_back(norm);
                    }
                    c.output = s.x;
                    c.label = std::string(rms ? "rms" : "ln") + " axis=" + std::to_string(s.axis) + " eps=" + num(s.eps);
                    int64_t const cols = numel(norm);
                    double const eps = s.eps;
                    c.reference = [rms, cols, eps, nIn](std::vector<HostTensor> const& h) {
                        return normReference(rms, h[0], nIn > 1 ? &h[1] : nullptr, nIn > 2 ? &h[2] : nullptr, cols, eps);
                    };
                    // Offset rows: a large mean tests the two-pass variance.
                    DataType const type = t;
                    c.makeInputs = [type, nIn, s, norm](std::mt19937& rng) {
                        std::vector<HostTensor> h;
                        h.push_back(randomTensor(type, s.x, rng, -2.F, 2.F, 8.F));
                        for (int i = 1; i < nIn; ++i)
                        {
                            h.push_back(randomTensor(type, norm, rng, -1.5F, 1.5F));
                        }
                        return h;
                    };
                    tolerances(c, false);
                    if (t == DataType::kBF16)
                    {
                        c.atol = 6e-2; // an offset-8 bf16 input keeps 4 fraction bits less
                    }
                    cases.push_back(std::move(c));
                }
            }
        }
    }
    return cases;
}

// S = X + Skip + Bias rounded to the type after each add (the kernels' and the model's order).
HostTensor skipSum(HostTensor const& x, HostTensor const& skip, HostTensor const& bias, int64_t cols)
{
    HostTensor s = x;
    for (size_t i = 0; i < x.values.size(); ++i)
    {
        store(s, i, static_cast<float>(x.values[i] + skip.values[i]));
        store(s, i, static_cast<float>(s.values[i] + bias.values[i % static_cast<size_t>(cols)]));
    }
    return s;
}

std::vector<Case> skipNormCases()
{
    std::vector<Case> cases;
    Shape const shapes[] = {{4, 37, 1025}, {6, 8, 768}};
    for (bool rms : {false, true})
    {
        for (DataType t : kTYPES)
        {
            for (Shape const& x : shapes)
            {
                for (int withSum : {0, 1})
                {
                    Case c;
                    c.plugin = rms ? specs::fused_skip_rms_norm::kSPEC.name : specs::fused_skip_layer_norm::kSPEC.name;
                    c.type = t;
                    double const eps = 1e-5;
                    c.fields = {{"epsilon", num(eps)}, {"axis", "-1"}, {"with_sum", std::to_string(withSum)}};
                    Shape const norm{x.back()};
                    int const nIn = rms ? 4 : 5;
                    c.inputs = {x, x};
                    for (int i = 2; i < nIn; ++i)
                    {
                        c.inputs.push_back(norm);
                    }
                    c.output = x;
                    c.nbOutputs = 2;
                    c.label = std::string(rms ? "skip rms" : "skip ln") + " with_sum=" + std::to_string(withSum);
                    int64_t const cols = x.back();
                    c.reference = [rms, cols, eps](std::vector<HostTensor> const& h) {
                        HostTensor const s = skipSum(h[0], h[1], h[2], cols);
                        return normReference(rms, s, &h[3], rms ? nullptr : &h[4], cols, eps);
                    };
                    if (withSum)
                    {
                        c.reference1 = [cols](std::vector<HostTensor> const& h) { return skipSum(h[0], h[1], h[2], cols).values; };
                    }
                    DataType const type = t;
                    c.makeInputs = [type, nIn, x, norm](std::mt19937& rng) {
                        std::vector<HostTensor> h;
                        h.push_back(randomTensor(type, x, rng, -2.F, 2.F, 4.F));
                        h.push_back(randomTensor(type, x, rng, -2.F, 2.F, 4.F));
                        for (int i = 2; i < nIn; ++i)
                        {
                            h.push_back(randomTensor(type, norm, rng, -1.5F, 1.5F));
                        }
                        return h;
                    };
                    tolerances(c, false);
                    if (t == DataType::kBF16)
                    {
                        c.atol = 6e-2;
                    }
                    cases.push_back(std::move(c));
                }
            }
        }
    }
    return cases;
}

std::vector<Case> fcCases()
{
    std::vector<Case> cases;
    for (DataType t : kTYPES)
    {
        for (char const* act : specs::fused_fc::kACTIVATION_CHOICES)
        {
            for (int transW : {0, 1})
            {
                Case c;
                c.plugin = specs::fused_fc::kSPEC.name;
                c.type = t;
                int64_t const k = 256;
                int64_t const n = 320;
                double const alpha = transW ? 0.5 : 1.0;
                c.fields = {{"out_features", std::to_string(n)}, {"transpose_weight", std::to_string(transW)},
                    {"alpha", num(alpha)}, {"activation", act}};
                c.inputs = {{2, 33, k}, transW ? Shape{n, k} : Shape{k, n}, {n}};
                c.output = {2, 33, n};
                c.label = std::string("act=") + act + " transpose_weight=" + std::to_string(transW);
                std::string const a = act;
                c.reference = [n, transW, alpha, a](std::vector<HostTensor> const& h) {
                    return fcReference(h[0], h[1], h[2], n, transW != 0, alpha, a);
                };
                DataType const type = t;
                Shape const wShape = c.inputs[1];
                // Pre-activations spread over about +-4: erf- and tanh-GELU differ there.
                c.makeInputs = [type, k, n, wShape](std::mt19937& rng) {
                    std::vector<HostTensor> h;
                    h.push_back(randomTensor(type, {2, 33, k}, rng, -1.F, 1.F));
                    float const ws = 3.5F / std::sqrt(static_cast<float>(k));
                    h.push_back(randomTensor(type, wShape, rng, -ws, ws));
                    h.push_back(randomTensor(type, {n}, rng, -1.F, 1.F));
                    return h;
                };
                tolerances(c, true);
                if (t == DataType::kFLOAT && a == "gelu_tanh")
                {
                    c.atol = 1e-3; // cuBLASLt's epilogue may use a fast tanh
                }
                cases.push_back(std::move(c));
            }
        }
    }
    // Odd sizes: K and N not multiples of 8, rank-2 X.
    Case c;
    c.plugin = specs::fused_fc::kSPEC.name;
    c.type = DataType::kHALF;
    c.fields = {{"out_features", "50"}, {"transpose_weight", "1"}, {"alpha", "1"}, {"activation", "relu"}};
    c.inputs = {{7, 100}, {50, 100}, {50}};
    c.output = {7, 50};
    c.label = "odd K=100 N=50 relu";
    c.reference = [](std::vector<HostTensor> const& h) { return fcReference(h[0], h[1], h[2], 50, true, 1.0, "relu"); };
    tolerances(c, true);
    cases.push_back(std::move(c));
    return cases;
}

std::vector<Case> groupNormCases()
{
    std::vector<Case> cases;
    struct S
    {
        Shape x;
        int64_t groups;
        double eps;
    };
    // 32 groups of a UNet block; odd sizes (C / G = 6, spatial 7); rank 2 (spatial 1); the
    // largest register-path group (40960, SD-UNet 320x64x64; fp32 staged on sm_90+); more
    // fp32-staged groups (640 threads) than an H100 has SMs; a group of 80000 (fp32: the wide
    // path where the device's shared memory holds its tail; fp16 on sm_90+: the wide kernel in
    // 512-thread CTAs, two an SM); 280 groups of 49152 (the same two with more groups than CTAs:
    // in fp32 each CTA loads its next group's head and tail as it writes this one; in fp16 the
    // groups outnumber the pairs, so K = 48, one CTA a group); groups of 294912 (sm_90+: the
    // stream path, 144 / 72 chunks a group); a group of 524288 (the stream path: 256 / 128
    // chunks, past the 96 whose partials warp 0 reads ahead).
    S const shapes[] = {{{2, 64, 8, 8}, 32, 1e-5}, {{3, 30, 7}, 5, 1e-6}, {{4, 16}, 4, 1e-3},
        {{1, 320, 64, 64}, 32, 1e-5}, {{200, 24, 32, 32}, 1, 1e-5}, {{1, 32, 100, 100}, 4, 1e-5},
        {{280, 12, 64, 64}, 1, 1e-5}, {{2, 32, 96, 96}, 1, 1e-5}, {{1, 8, 256, 256}, 1, 1e-5}};
    for (DataType t : {DataType::kFLOAT, DataType::kHALF})
    {
        for (S const& s : shapes)
        {
            for (int silu : {0, 1})
            {
                Case c;
                c.plugin = specs::fused_group_norm::kSPEC.name;
                c.type = t;
                c.fields = {{"epsilon", num(s.eps)}, {"num_groups", std::to_string(s.groups)},
                    {"silu", std::to_string(silu)}};
                Shape const ch{s.x[1]};
                c.inputs = {s.x, ch, ch};
                c.output = s.x;
                c.label = "groups=" + std::to_string(s.groups) + " silu=" + std::to_string(silu);
                int64_t const groups = s.groups;
                double const eps = s.eps;
                c.reference = [groups, eps, silu](std::vector<HostTensor> const& h) {
                    return groupNormReference(h[0], h[1], h[2], groups, eps, silu != 0);
                };
                DataType const type = t;
                c.makeInputs = [type, s, ch](std::mt19937& rng) {
                    std::vector<HostTensor> h;
                    h.push_back(randomTensor(type, s.x, rng, -2.F, 2.F, 8.F)); // a large mean: two-pass variance
                    h.push_back(randomTensor(type, ch, rng, -1.5F, 1.5F));
                    h.push_back(randomTensor(type, ch, rng, -1.5F, 1.5F));
                    return h;
                };
                tolerances(c, false);
                cases.push_back(std::move(c));
            }
        }
    }
    return cases;
}

// Fields and shapes that must be refused (CPU only).
std::vector<std::pair<std::string, bool>> negativeChecks()
{
    std::vector<std::pair<std::string, bool>> out;
    gFinder.logger.verbose = false;
    std::string const ln = specs::fused_layer_norm::kSPEC.name;
    std::string const fcName = specs::fused_fc::kSPEC.name;
    auto refused = [](IPluginV3* p) {
        std::unique_ptr<IPluginV3> owner(p);
        return p == nullptr;
    };
    out.emplace_back("ln without epsilon", refused(create(ln, {{"axis", "-1"}}, TensorRTPhase::kBUILD)));
    out.emplace_back("ln unknown field", refused(create(ln, {{"epsilon", "1e-5"}, {"bogus", "1"}}, TensorRTPhase::kBUILD)));
    out.emplace_back("ln negative epsilon", refused(create(ln, {{"epsilon", "-1"}}, TensorRTPhase::kBUILD)));
    out.emplace_back("fc unknown activation",
        refused(create(fcName, {{"out_features", "8"}, {"activation", "swish"}}, TensorRTPhase::kBUILD)));
    out.emplace_back("fc out_features 0", refused(create(fcName, {{"out_features", "0"}}, TensorRTPhase::kBUILD)));
    out.emplace_back("fc transpose_weight 2",
        refused(create(fcName, {{"out_features", "8"}, {"transpose_weight", "2"}}, TensorRTPhase::kBUILD)));
    {
        // Scale with the wrong element count.
        std::unique_ptr<IPluginV3> p(create(ln, {{"epsilon", "1e-5"}}, TensorRTPhase::kBUILD));
        auto* b = cap<IPluginV3OneBuild>(p.get(), PluginCapabilityType::kBUILD);
        auto in = dynamicDescs({{4, 64}, {63}}, DataType::kFLOAT, false);
        auto o = dynamicDescs({{4, 64}}, DataType::kFLOAT, false);
        out.emplace_back("ln scale of wrong size", b != nullptr && b->configurePlugin(in.data(), 2, o.data(), 1) != 0);
        auto in2 = dynamicDescs({{4, 64}}, DataType::kFLOAT, false);
        std::unique_ptr<IPluginV3> p2(create(ln, {{"epsilon", "1e-5"}, {"axis", "-3"}}, TensorRTPhase::kBUILD));
        auto* b2 = cap<IPluginV3OneBuild>(p2.get(), PluginCapabilityType::kBUILD);
        out.emplace_back("ln axis beyond rank", b2 != nullptr && b2->configurePlugin(in2.data(), 1, o.data(), 1) != 0);
    }
    {
        std::unique_ptr<IPluginV3> p(create(fcName, {{"out_features", "16"}}, TensorRTPhase::kBUILD));
        auto* b = cap<IPluginV3OneBuild>(p.get(), PluginCapabilityType::kBUILD);
        auto in = dynamicDescs({{4, 32}, {31, 16}, {16}}, DataType::kHALF, false);
        auto o = dynamicDescs({{4, 16}}, DataType::kHALF, false);
        out.emplace_back("fc weight of wrong shape", b != nullptr && b->configurePlugin(in.data(), 3, o.data(), 1) != 0);
    }
    {
        std::string const gn = specs::fused_group_norm::kSPEC.name;
        out.emplace_back("gn silu 2",
            refused(create(gn, {{"epsilon", "1e-5"}, {"num_groups", "4"}, {"silu", "2"}}, TensorRTPhase::kBUILD)));
        out.emplace_back("gn num_groups 0",
            refused(create(gn, {{"epsilon", "1e-5"}, {"num_groups", "0"}}, TensorRTPhase::kBUILD)));
        out.emplace_back("gn without num_groups", refused(create(gn, {{"epsilon", "1e-5"}}, TensorRTPhase::kBUILD)));
        std::unique_ptr<IPluginV3> p(create(gn, {{"epsilon", "1e-5"}, {"num_groups", "3"}}, TensorRTPhase::kBUILD));
        auto* b = cap<IPluginV3OneBuild>(p.get(), PluginCapabilityType::kBUILD);
        auto in = dynamicDescs({{2, 16, 4}, {16}, {16}}, DataType::kFLOAT, false);
        auto o = dynamicDescs({{2, 16, 4}}, DataType::kFLOAT, false);
        out.emplace_back("gn groups not dividing channels", b != nullptr && b->configurePlugin(in.data(), 3, o.data(), 1) != 0);
        std::unique_ptr<IPluginV3> p2(create(gn, {{"epsilon", "1e-5"}, {"num_groups", "4"}}, TensorRTPhase::kBUILD));
        auto* b2 = cap<IPluginV3OneBuild>(p2.get(), PluginCapabilityType::kBUILD);
        auto in2 = dynamicDescs({{2, 16, 4}, {8}, {16}}, DataType::kFLOAT, false);
        out.emplace_back("gn scale of wrong size", b2 != nullptr && b2->configurePlugin(in2.data(), 3, o.data(), 1) != 0);
    }
    gFinder.logger.verbose = true;
    return out;
}

// ------------------------------------------------------------------ benchmark

// Median ms per launch over 5 timed batches of >= 20 ms.  The launches are captured into a
// CUDA graph of `reps` launches and replayed (as the Python side times torch), so host
// launch cost does not count; eager launches if capture fails (`graphed` says which).
double timeMs(std::function<void(int)> const& launch, cudaStream_t stream, int reps, bool& graphed)
{
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i)
    {
        launch(i);
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    char const* eager = std::getenv("FUSION_HARNESS_EAGER");
    graphed = (eager == nullptr || *eager == '\0' || *eager == '0')
        && cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess;
    if (graphed)
    {
        for (int i = 0; i < reps; ++i)
        {
            launch(i);
        }
        graphed = cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr
            && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    }
    cudaGetLastError(); // a failed capture leaves an error behind
    auto batch = [&]() {
        if (graphed)
        {
            CUDA_OK(cudaGraphLaunch(exec, stream));
        }
        else
        {
            for (int i = 0; i < reps; ++i)
            {
                launch(i);
            }
        }
    };
    CUDA_OK(cudaEventRecord(a, stream));
    batch();
    CUDA_OK(cudaEventRecord(b, stream));
    CUDA_OK(cudaEventSynchronize(b));
    float one = 0;
    CUDA_OK(cudaEventElapsedTime(&one, a, b));
    int const repeat = std::max(1, std::min(200, static_cast<int>(20.0 / std::max(one, 1e-3F))));
    std::vector<double> trials;
    for (int t = 0; t < 5; ++t)
    {
        CUDA_OK(cudaEventRecord(a, stream));
        for (int i = 0; i < repeat; ++i)
        {
            batch();
        }
        CUDA_OK(cudaEventRecord(b, stream));
        CUDA_OK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, a, b));
        trials.push_back(ms / (repeat * reps));
    }
    std::sort(trials.begin(), trials.end());
    if (exec != nullptr)
    {
        cudaGraphExecDestroy(exec);
    }
    if (graph != nullptr)
    {
        cudaGraphDestroy(graph);
    }
    CUDA_OK(cudaEventDestroy(a));
    CUDA_OK(cudaEventDestroy(b));
    return trials[2];
}

DataType parseType(std::string const& s)
{
    if (s == "float32" || s == "f32")
    {
        return DataType::kFLOAT;
    }
    return (s == "float16" || s == "f16") ? DataType::kHALF : DataType::kBF16;
}

std::vector<std::string> split(std::string const& s, char sep)
{
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep))
    {
        out.push_back(item);
    }
    return out;
}

// fc:DTYPE:M:K:N:ACT (transpose_weight=1, like nn.Linear) or norm:OP:DTYPE:ROWS:COLS.
std::string bench(std::string const& spec)
{
    auto const p = split(spec, ':');
    bool const isFc = p.size() == 6 && p[0] == "fc";
    bool const isNorm = p.size() == 5 && p[0] == "norm";
    if (!isFc && !isNorm)
    {
        return "{\"spec\": \"" + spec + "\", \"error\": \"bad spec\"}";
    }
    DataType const type = parseType(isFc ? p[1] : p[2]);
    std::string name;
    FieldList fields;
    std::vector<Shape> ins;
    Shape out;
    if (isFc)
    {
        int64_t const m = std::stoll(p[2]), k = std::stoll(p[3]), n = std::stoll(p[4]);
        name = specs::fused_fc::kSPEC.name;
        fields = {{"out_features", p[4]}, {"transpose_weight", "1"}, {"alpha", "1"}, {"activation", p[5]}};
        ins = {{m, k}, {n, k}, {n}};
        out = {m, n};
    }
    else
    {
        int64_t const rows = std::stoll(p[3]), cols = std::stoll(p[4]);
        bool const rms = p[1] == "rmsnorm";
        name = rms ? specs::fused_rms_norm::kSPEC.name : specs::fused_layer_norm::kSPEC.name;
        fields = {{"epsilon", "1e-5"}, {"axis", "-1"}};
        ins = rms ? std::vector<Shape>{{rows, cols}, {cols}} : std::vector<Shape>{{rows, cols}, {cols}, {cols}};
        out = {rows, cols};
    }
    std::unique_ptr<IPluginV3> plugin(create(name, fields, TensorRTPhase::kRUNTIME));
    auto* build = cap<IPluginV3OneBuild>(plugin.get(), PluginCapabilityType::kBUILD);
    auto* rt = cap<IPluginV3OneRuntime>(plugin.get(), PluginCapabilityType::kRUNTIME);
    if (build == nullptr || rt == nullptr)
    {
        return "{\"spec\": \"" + spec + "\", \"error\": \"create failed\"}";
    }
    int32_t const nIn = static_cast<int32_t>(ins.size());
    auto inDyn = dynamicDescs(ins, type, false);
    auto outDyn = dynamicDescs({out}, type, false);
    size_t const ws = build->getWorkspaceSize(inDyn.data(), nIn, outDyn.data(), 1);
    auto inD = staticDescs(ins, type);
    auto outD = staticDescs({out}, type);
    if (build->configurePlugin(inDyn.data(), nIn, outDyn.data(), 1) != 0
        || rt->onShapeChange(inD.data(), nIn, outD.data(), 1) != 0)
    {
        return "{\"spec\": \"" + spec + "\", \"error\": \"configure failed: " + gFinder.logger.last + "\"}";
    }
    // Norms: rotate X/Y copies so at least 256 MB are touched per cycle (L2 is 50 MB).
    size_t const xBytes = static_cast<size_t>(numel(ins[0])) * typeSize(type);
    size_t const yBytes = static_cast<size_t>(numel(out)) * typeSize(type);
    int const copies = isNorm ? static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / (xBytes + yBytes) + 1)) : 1;
    std::vector<std::unique_ptr<DeviceBuffer>> xs, ys;
    std::mt19937 rng(7);
    // Random values for a 1 MB tile, repeated: generating GBs on the host would dominate.
    Shape const tileShape{std::min<int64_t>(numel(ins[0]), int64_t{1} << 19)};
    HostTensor const tile = randomTensor(type, tileShape, rng, -1.F, 1.F);
    for (int i = 0; i < copies; ++i)
    {
        xs.emplace_back(new DeviceBuffer(xBytes));
        ys.emplace_back(new DeviceBuffer(yBytes));
        for (size_t off = 0; off < xBytes; off += tile.bytes.size())
        {
            size_t const n = std::min(tile.bytes.size(), xBytes - off);
            CUDA_OK(cudaMemcpy(static_cast<char*>(xs.back()->ptr) + off, tile.bytes.data(), n, cudaMemcpyHostToDevice));
        }
    }
    std::vector<std::unique_ptr<DeviceBuffer>> rest;
    for (int32_t i = 1; i < nIn; ++i)
    {
        HostTensor const h = randomTensor(type, ins[static_cast<size_t>(i)], rng, -0.05F, 0.05F);
        rest.emplace_back(new DeviceBuffer(h.bytes.size()));
        CUDA_OK(cudaMemcpy(rest.back()->ptr, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice));
    }
    DeviceBuffer wsBuf(ws);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    int failures = 0;
    bool graphed = false;
    int const reps = copies * std::max(1, (16 + copies - 1) / copies);
    double const ms = timeMs(
        [&](int i) {
            int const j = i % copies;
            void const* inPtrs[3] = {xs[static_cast<size_t>(j)]->ptr, nullptr, nullptr};
            for (int32_t q = 1; q < nIn; ++q)
            {
                inPtrs[q] = rest[static_cast<size_t>(q - 1)]->ptr;
            }
            void* outPtr = ys[static_cast<size_t>(j)]->ptr;
            failures += rt->enqueue(inD.data(), outD.data(), inPtrs, &outPtr, wsBuf.ptr, stream) != 0;
        },
        stream, reps, graphed);
    CUDA_OK(cudaStreamDestroy(stream));
    std::ostringstream o;
    o.precision(6);
    o << "{\"spec\": \"" << spec << "\", \"ms\": " << ms << ", \"enqueue_failures\": " << failures
      << ", \"bytes\": " << (xBytes + yBytes) << ", \"timing\": \"" << (graphed ? "cuda_graph" : "eager") << "\"}";
    return o.str();
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2)
    {
        fprintf(stderr, "usage: %s LIB [--cpu] [--json FILE] [--bench SPEC ...]\n", argv[0]);
        return 2;
    }
    bool cpuOnly = false;
    std::string jsonPath;
    std::vector<std::string> benches;
    for (int i = 2; i < argc; ++i)
    {
        std::string const a = argv[i];
        if (a == "--cpu")
        {
            cpuOnly = true;
        }
        else if (a == "--json" && i + 1 < argc)
        {
            jsonPath = argv[++i];
        }
        else if (a == "--bench" && i + 1 < argc)
        {
            benches.emplace_back(argv[++i]);
        }
        else
        {
            fprintf(stderr, "unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!gLib.open(argv[1]))
    {
        return 1;
    }
    if (!benches.empty())
    {
        printf("[\n");
        for (size_t i = 0; i < benches.size(); ++i)
        {
            printf("%s%s\n", bench(benches[i]).c_str(), i + 1 < benches.size() ? "," : "");
            fflush(stdout);
        }
        printf("]\n");
        return 0;
    }

    std::mt19937 rng(1234);
    std::vector<Case> cases = normCases();
    for (auto& c : fcCases())
    {
        cases.push_back(std::move(c));
    }
    for (auto& c : groupNormCases())
    {
        cases.push_back(std::move(c));
    }
    for (auto& c : skipNormCases())
    {
        cases.push_back(std::move(c));
    }
    int passed = 0;
    int failed = 0;
    std::ostringstream json;
    json << "{\"mode\": \"" << (cpuOnly ? "cpu" : "gpu") << "\", \"cases\": [\n";
    for (size_t i = 0; i < cases.size(); ++i)
    {
        bool ok = false;
        std::string const line = runCase(cases[i], cpuOnly, rng, ok);
        json << (i ? ",\n" : "") << line;
        (ok ? passed : failed)++;
        printf("%-4s %-15s %-9s %-16s in=%zu %s\n", ok ? "ok" : "FAIL", cases[i].plugin.c_str(),
            typeText(cases[i].type), shapeText(cases[i].inputs[0]).c_str(), cases[i].inputs.size(),
            cases[i].label.c_str());
        if (!ok)
        {
            printf("     %s\n", line.c_str());
        }
    }
    json << "\n], \"negative\": [\n";
    auto const neg = negativeChecks();
    for (size_t i = 0; i < neg.size(); ++i)
    {
        json << (i ? ",\n" : "") << "{\"check\": \"" << neg[i].first << "\", \"ok\": " << (neg[i].second ? "true" : "false")
             << "}";
        (neg[i].second ? passed : failed)++;
        printf("%-4s refuses: %s\n", neg[i].second ? "ok" : "FAIL", neg[i].first.c_str());
    }
    json << "\n], \"passed\": " << passed << ", \"failed\": " << failed << "}\n";
    if (!jsonPath.empty())
    {
        FILE* f = fopen(jsonPath.c_str(), "w");
        if (f != nullptr)
        {
            fputs(json.str().c_str(), f);
            fclose(f);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
